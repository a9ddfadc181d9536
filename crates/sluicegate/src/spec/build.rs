//! What each algorithm of a spec takes, and how it is built; `set_rate` on a built algorithm.

use std::time::Duration;

use crate::algorithm::{
    Concurrency, FixedWindow, Gcra, LeakyBucket, LeakyQueue, QueueDelay, SlidingLog, SlidingWindow,
    SmoothBursty, SmoothWarmup, TokenBucket,
};
use crate::error::ConfigError;
use crate::rate::Rate;
use crate::spec::any::AnyAlgorithm;
use crate::spec::values;
use crate::state_machine::Algorithm;

/// One algorithm's spec grammar.
pub(super) struct Kind {
    /// The algorithm's name, as spec strings and rule files write it (`token-bucket`, `gcra`, ...).
    pub(super) name: &'static str,
    /// Every parameter it takes, canonical names.
    pub(super) params: &'static [&'static str],
    /// The parameters it cannot do without.
    pub(super) required: &'static [&'static str],
    /// Parameters written alone (`nodelay`).
    pub(super) flags: &'static [&'static str],
    /// Other names accepted for a parameter: (alias, canonical).
    pub(super) aliases: &'static [(&'static str, &'static str)],
    /// The parameters as listed in error messages.
    pub(super) expected: &'static str,
    /// Which parameters a quota (a rule file's `requests_per_unit` per `unit`) stands for.
    pub(super) quota: QuotaParams,
    /// Reads the values and builds the algorithm.
    pub(super) build: fn(&Params<'_>) -> Result<AnyAlgorithm, ConfigError>,
}

/// Which parameters of an algorithm a quota of `permits` per `period` fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum QuotaParams {
    /// `rate=PERMITS/PERIOD` (the buckets; the smooth limiters read it as permits per second).
    Rate,
    /// `limit=PERMITS,window=PERIOD` (the windows).
    LimitWindow,
    /// `limit=PERMITS` alone (concurrency has no period).
    Limit,
}

impl Kind {
    /// The canonical name of parameter `written`, if this algorithm takes it.
    pub(super) fn canonical(&self, written: &str) -> Option<&'static str> {
        let lower = written.to_ascii_lowercase().replace('-', "_");
        let alias = self.aliases.iter().find(|(a, _)| *a == lower);
        alias
            .map(|(_, canonical)| *canonical)
            .or_else(|| self.params.iter().copied().find(|p| *p == lower))
    }
}

pub(super) const KINDS: &[Kind] = &[
    Kind {
        name: "token-bucket",
        quota: QuotaParams::Rate,
        params: &["rate", "burst", "initial"],
        required: &["rate"],
        flags: &[],
        aliases: &[("capacity", "burst")],
        expected: "rate, burst, initial",
        build: build_token_bucket,
    },
    Kind {
        name: "gcra",
        quota: QuotaParams::Rate,
        params: &["rate", "burst", "initial"],
        required: &["rate"],
        flags: &[],
        aliases: &[("capacity", "burst")],
        expected: "rate, burst, initial",
        build: build_gcra,
    },
    Kind {
        name: "fixed-window",
        quota: QuotaParams::LimitWindow,
        params: &["limit", "window"],
        required: &["limit", "window"],
        flags: &[],
        aliases: &[],
        expected: "limit, window",
        build: build_fixed_window,
    },
    Kind {
        name: "sliding-log",
        quota: QuotaParams::LimitWindow,
        params: &["limit", "window"],
        required: &["limit", "window"],
        flags: &[],
        aliases: &[],
        expected: "limit, window",
        build: build_sliding_log,
    },
    Kind {
        name: "sliding-window",
        quota: QuotaParams::LimitWindow,
        params: &["limit", "window", "buckets"],
        required: &["limit", "window"],
        flags: &[],
        aliases: &[],
        expected: "limit, window, buckets",
        build: build_sliding_window,
    },
    Kind {
        name: "leaky-bucket",
        quota: QuotaParams::Rate,
        params: &["rate", "capacity"],
        required: &["rate"],
        flags: &[],
        aliases: &[("burst", "capacity")],
        expected: "rate, capacity (alias burst)",
        build: build_leaky_bucket,
    },
    Kind {
        name: "leaky-queue",
        quota: QuotaParams::Rate,
        params: &["rate", "burst", "delay", "nodelay"],
        required: &["rate"],
        flags: &["nodelay"],
        aliases: &[],
        expected: "rate, burst, delay, nodelay",
        build: build_leaky_queue,
    },
    Kind {
        name: "smooth-bursty",
        quota: QuotaParams::Rate,
        params: &["rate", "burst_seconds"],
        required: &["rate"],
        flags: &[],
        aliases: &[("max_burst_seconds", "burst_seconds")],
        expected: "rate, burst_seconds",
        build: build_smooth_bursty,
    },
    Kind {
        name: "smooth-warmup",
        quota: QuotaParams::Rate,
        params: &["rate", "warmup", "cold_factor"],
        required: &["rate", "warmup"],
        flags: &[],
        aliases: &[],
        expected: "rate, warmup, cold_factor",
        build: build_smooth_warmup,
    },
    Kind {
        name: "concurrency",
        quota: QuotaParams::Limit,
        params: &["limit"],
        required: &["limit"],
        flags: &[],
        aliases: &[],
        expected: "limit",
        build: build_concurrency,
    },
];

/// Every algorithm name, as listed in error messages.
const KNOWN: &str = "token-bucket, gcra, fixed-window, sliding-log, sliding-window, \
     leaky-bucket, leaky-queue, smooth-bursty, smooth-warmup, concurrency";

/// The grammar of the algorithm named `written` (case-insensitive, `_` for `-`).
pub(super) fn kind_named(written: &str) -> Result<&'static Kind, ConfigError> {
    values::named(KINDS, |k| k.name, written).ok_or_else(|| ConfigError::UnknownAlgorithm {
        name: written.trim().to_owned(),
        known: KNOWN,
    })
}

/// A spec's parameters, read one by one.
pub(super) struct Params<'a> {
    algorithm: &'static str,
    items: &'a [(&'static str, String)],
}

impl<'a> Params<'a> {
    pub(super) fn new(algorithm: &'static str, items: &'a [(&'static str, String)]) -> Self {
        Params { algorithm, items }
    }

    pub(super) fn check_required(&self, kind: &Kind) -> Result<(), ConfigError> {
        match kind.required.iter().find(|name| self.get(name).is_none()) {
            Some(name) => Err(ConfigError::MissingParameter {
                algorithm: self.algorithm,
                name,
            }),
            None => Ok(()),
        }
    }

    fn get(&self, name: &str) -> Option<&'a str> {
        values::given(self.items, name)
    }

    fn required(&self, name: &'static str) -> Result<&'a str, ConfigError> {
        self.get(name).ok_or(ConfigError::MissingParameter {
            algorithm: self.algorithm,
            name,
        })
    }

    fn rate(&self, name: &'static str) -> Result<Rate, ConfigError> {
        values::rate(name, self.required(name)?)
    }

    fn count(&self, name: &'static str) -> Result<u64, ConfigError> {
        values::count(name, self.required(name)?)
    }

    fn optional_count(&self, name: &'static str) -> Result<Option<u64>, ConfigError> {
        self.get(name).map(|v| values::count(name, v)).transpose()
    }

    fn duration(&self, name: &'static str) -> Result<Duration, ConfigError> {
        values::duration(name, self.required(name)?)
    }

    fn per_second(&self, name: &'static str) -> Result<f64, ConfigError> {
        values::per_second(name, self.required(name)?)
    }

    fn optional_number(&self, name: &'static str) -> Result<Option<f64>, ConfigError> {
        self.get(name).map(|v| values::number(name, v)).transpose()
    }
}

/// A bucket's rate and burst; the burst defaults to the rate's permits (`100/1m` holds 100).
fn rate_and_burst(params: &Params<'_>) -> Result<(Rate, u64, Option<u64>), ConfigError> {
    let rate = params.rate("rate")?;
    let burst = params.optional_count("burst")?.unwrap_or(rate.permits());
    Ok((rate, burst, params.optional_count("initial")?))
}

fn build_token_bucket(params: &Params<'_>) -> Result<AnyAlgorithm, ConfigError> {
    let (rate, burst, initial) = rate_and_burst(params)?;
    let bucket = match initial {
        Some(initial) => TokenBucket::with_initial(rate, burst, initial)?,
        None => TokenBucket::new(rate, burst)?,
    };
    Ok(bucket.into())
}

fn build_gcra(params: &Params<'_>) -> Result<AnyAlgorithm, ConfigError> {
    let (rate, burst, initial) = rate_and_burst(params)?;
    let gcra = match initial {
        Some(initial) => Gcra::with_initial(rate, burst, initial)?,
        None => Gcra::new(rate, burst)?,
    };
    Ok(gcra.into())
}

fn build_fixed_window(params: &Params<'_>) -> Result<AnyAlgorithm, ConfigError> {
    let window = FixedWindow::new(params.count("limit")?, params.duration("window")?)?;
    Ok(window.into())
}

fn build_sliding_log(params: &Params<'_>) -> Result<AnyAlgorithm, ConfigError> {
    let log = SlidingLog::new(params.count("limit")?, params.duration("window")?)?;
    Ok(log.into())
}

fn build_sliding_window(params: &Params<'_>) -> Result<AnyAlgorithm, ConfigError> {
    let buckets = params
        .optional_count("buckets")?
        .map(|k| {
            u32::try_from(k).map_err(|_| ConfigError::invalid("buckets", k, "too many buckets"))
        })
        .transpose()?;
    let window = SlidingWindow::new(params.count("limit")?, params.duration("window")?, buckets)?;
    Ok(window.into())
}

fn build_leaky_bucket(params: &Params<'_>) -> Result<AnyAlgorithm, ConfigError> {
    // As the token bucket: the rate's permits unless a capacity is given (`100/1m` holds 100).
    let rate = params.rate("rate")?;
    let capacity = params.optional_count("capacity")?.unwrap_or(rate.permits());
    Ok(LeakyBucket::new(rate, capacity)?.into())
}

fn build_leaky_queue(params: &Params<'_>) -> Result<AnyAlgorithm, ConfigError> {
    let delay = match (params.get("nodelay"), params.optional_count("delay")?) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::invalid(
                "delay",
                params.get("delay").unwrap_or_default(),
                "cannot go with nodelay: give one or the other",
            ));
        }
        (Some(_), None) => QueueDelay::NoDelay,
        (None, Some(d)) => QueueDelay::After(d),
        (None, None) => QueueDelay::Shape,
    };
    // nginx's default: no burst unless one is given.
    let burst = params.optional_count("burst")?.unwrap_or(0);
    if let QueueDelay::After(d) = delay {
        // nginx reads a delay beyond the burst as `nodelay`; a spec says `nodelay` instead, so
        // that a typo in either number is not silently read as "never wait".
        if d > burst {
            return Err(ConfigError::invalid(
                "delay",
                d,
                format!("delay ({d}) cannot exceed burst ({burst}); write nodelay for no wait"),
            ));
        }
    }
    Ok(LeakyQueue::new(params.rate("rate")?, burst, delay)?.into())
}

fn build_smooth_bursty(params: &Params<'_>) -> Result<AnyAlgorithm, ConfigError> {
    // Guava's `create(permitsPerSecond)` saves up to one second of permits.
    let burst_seconds = params.optional_number("burst_seconds")?.unwrap_or(1.0);
    Ok(SmoothBursty::new(params.per_second("rate")?, burst_seconds)?.into())
}

fn build_smooth_warmup(params: &Params<'_>) -> Result<AnyAlgorithm, ConfigError> {
    let cold_factor = params
        .optional_number("cold_factor")?
        .unwrap_or(SmoothWarmup::DEFAULT_COLD_FACTOR);
    let warmup = SmoothWarmup::new(
        params.per_second("rate")?,
        params.duration("warmup")?,
        cold_factor,
    )?;
    Ok(warmup.into())
}

fn build_concurrency(params: &Params<'_>) -> Result<AnyAlgorithm, ConfigError> {
    Ok(Concurrency::new(params.count("limit")?)?.into())
}

impl AnyAlgorithm {
    /// The same algorithm at another rate (the trace op `set_rate:RATE`), every other
    /// parameter kept: buckets take a rate (`20/s`), the smooth limiters a plain number of
    /// permits per second (`2.5`), windows a new limit (`50`) or a limit per window
    /// (`50/30s`), concurrency a new limit.
    ///
    /// Carry a limiter's state over with [`Algorithm::carry_over`] (or
    /// [`KeyedLimiter::set_algorithm`](crate::KeyedLimiter::set_algorithm)).
    pub fn with_rate(&self, text: &str) -> Result<AnyAlgorithm, ConfigError> {
        Ok(match self {
            AnyAlgorithm::TokenBucket(bucket) => {
                TokenBucket::new(values::rate("rate", text)?, bucket.limit())?.into()
            }
            AnyAlgorithm::Gcra(gcra) => {
                Gcra::new(values::rate("rate", text)?, gcra.burst())?.into()
            }
            AnyAlgorithm::FixedWindow(window) => {
                let (limit, length) = window_rate(text, window.window())?;
                FixedWindow::new(limit, length)?.into()
            }
            AnyAlgorithm::SlidingLog(log) => {
                let (limit, length) = window_rate(text, log.window())?;
                SlidingLog::new(limit, length)?.into()
            }
            AnyAlgorithm::SlidingWindow(window) => {
                let (limit, length) = window_rate(text, window.window())?;
                let buckets = window.buckets().and_then(|k| u32::try_from(k).ok());
                SlidingWindow::new(limit, length, buckets)?.into()
            }
            AnyAlgorithm::LeakyBucket(bucket) => {
                LeakyBucket::new(values::rate("rate", text)?, bucket.bucket_capacity())?.into()
            }
            AnyAlgorithm::LeakyQueue(queue) => {
                LeakyQueue::new(values::rate("rate", text)?, queue.burst(), queue.delay())?.into()
            }
            AnyAlgorithm::SmoothBursty(smooth) => {
                smooth.with_rate(values::per_second("rate", text)?)?.into()
            }
            AnyAlgorithm::SmoothWarmup(smooth) => {
                smooth.with_rate(values::per_second("rate", text)?)?.into()
            }
            AnyAlgorithm::Concurrency(_) => Concurrency::new(values::count("limit", text)?)?.into(),
        })
    }
}

/// A window's new limit: `50` keeps the window, `50/30s` sets both.
fn window_rate(text: &str, window: Duration) -> Result<(u64, Duration), ConfigError> {
    if text.contains('/') {
        let rate = values::rate("rate", text)?;
        return Ok((rate.permits(), rate.period()));
    }
    Ok((values::count("limit", text)?, window))
}
