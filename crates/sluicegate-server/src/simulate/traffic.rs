//! `--traffic`: generated traces (Poisson arrivals, at a steady or a linearly ramping rate, an
//! even stream, periodic bursts).

use sluicegate::clock::micros_ceil;
use sluicegate::rate::parse_duration;
use sluicegate::state_machine::Op;
use sluicegate::{Micros, Rate};

use crate::simulate::event::{Event, EventOp};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};

/// A traffic generator, as given to `--traffic`.
#[derive(Debug, Clone, PartialEq)]
pub struct TrafficSpec {
    shape: Shape,
    duration: Micros,
    keys: u64,
    permits: u64,
}

#[derive(Debug, Clone, PartialEq)]
enum Shape {
    /// Arrivals at random, `rate` on average (exponential gaps).
    Poisson { rate: Rate },
    /// Arrivals at random at a rate moving in a straight line from `from` at t = 0 to `to` at
    /// the end (a non-homogeneous Poisson process).
    Ramp { from: Rate, to: Rate },
    /// One arrival every `1 / rate`, exactly.
    Uniform { rate: Rate },
    /// `size` arrivals at once, every `every`, from t = 0.
    Burst { size: u64, every: Micros },
}

const GENERATORS: &str = "poisson:rate=20/s,duration=10s | uniform:rate=5/s,duration=4s | \
     burst:size=50,every=5s,duration=20s | ramp:from=10/s,to=100/s,duration=60s (each also \
     takes keys=N, permits=N)";

impl TrafficSpec {
    /// Reads `NAME:key=value,...`.
    pub fn parse(text: &str) -> Result<TrafficSpec, String> {
        let (name, params) = text.split_once(':').unwrap_or((text, ""));
        let name = name.trim().to_ascii_lowercase();
        let takes: &[&str] = match name.as_str() {
            "poisson" | "uniform" => &["rate", "duration", "keys", "permits"],
            "burst" => &["size", "every", "duration", "keys", "permits"],
            "ramp" => &["from", "to", "duration", "keys", "permits"],
            _ => return Err(format!("unknown traffic `{name}` (use {GENERATORS})")),
        };
        let mut values: Vec<(&str, &str)> = Vec::new();
        for item in params.split(',').filter(|item| !item.trim().is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("expected key=value in `{}`", item.trim()))?;
            let key = key.trim();
            if !takes.contains(&key) {
                return Err(format!(
                    "unknown parameter `{key}` for {name} traffic (it takes: {})",
                    takes.join(", ")
                ));
            }
            if values.iter().any(|(k, _)| *k == key) {
                return Err(format!("parameter `{key}` given twice"));
            }
            values.push((key, value.trim()));
        }
        let get = |key: &str| values.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
        let required = |key: &str| {
            get(key).ok_or_else(|| format!("missing parameter `{key}` for {name} traffic"))
        };
        let duration = |key: &str| -> Result<Micros, String> {
            let text = required(key)?;
            let micros = parse_duration(text)
                .map(micros_ceil)
                .map_err(|e| format!("bad {key}: {e}"))?;
            if micros == 0 {
                return Err(format!("bad {key} `{text}`: must be more than zero"));
            }
            Ok(micros)
        };
        let count = |key: &str, default: u64| -> Result<u64, String> {
            match get(key) {
                None => Ok(default),
                Some(text) => match text.parse::<u64>() {
                    Ok(n) if n > 0 => Ok(n),
                    _ => Err(format!(
                        "bad {key} `{text}`: expected a whole number, at least 1"
                    )),
                },
            }
        };
        let rate = |key: &str| -> Result<Rate, String> {
            required(key)?
                .parse::<Rate>()
                .map_err(|e| format!("bad {key}: {e}"))
        };
        let shape = match name.as_str() {
            "poisson" => Shape::Poisson {
                rate: rate("rate")?,
            },
            "uniform" => Shape::Uniform {
                rate: rate("rate")?,
            },
            "ramp" => Shape::Ramp {
                from: rate("from")?,
                to: rate("to")?,
            },
            _ => Shape::Burst {
                size: required("size").and_then(|_| count("size", 1))?,
                every: duration("every")?,
            },
        };
        Ok(TrafficSpec {
            shape,
            duration: duration("duration")?,
            keys: count("keys", 1)?,
            permits: count("permits", 1)?,
        })
    }

    /// How long the traffic lasts, in microseconds: every arrival is before it.
    pub fn duration(&self) -> Micros {
        self.duration
    }

    /// The events, in time order, all before `duration`; the same `seed` gives the same ones.
    pub(crate) fn events(&self, seed: u64) -> impl Iterator<Item = Event> + '_ {
        self.arrivals(seed).map(|(t, key)| Event {
            t,
            key: format!("k{key}"),
            permits: self.permits,
            op: EventOp::Decide(Op::Check, "check".into()),
        })
    }

    /// When each request arrives: the times of the `--trace` events this spec generates.
    pub fn arrival_times(&self, seed: u64) -> impl Iterator<Item = Micros> + '_ {
        self.arrivals(seed).map(|(t, _)| t)
    }

    /// Each arrival's time and key index.
    fn arrivals(&self, seed: u64) -> impl Iterator<Item = (Micros, u64)> + '_ {
        // ChaCha8 is value-stable across rand_chacha releases: a seed names the same trace.
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut index: u64 = 0;
        let mut poisson_clock = 0.0f64;
        let duration = self.duration as f64;
        std::iter::from_fn(move || {
            let t = match &self.shape {
                Shape::Poisson { rate } => {
                    // Gaps are exponential with mean 1/rate; the first arrival too, so the
                    // process has no special event at t = 0.
                    poisson_clock += exponential_gap(rate, &mut rng);
                    poisson_clock.floor()
                }
                Shape::Ramp { from, to } => {
                    // Thinning (Lewis and Shedler): candidates at the highest rate, each kept
                    // with the probability rate(t) / highest, which is exact for any rate
                    // below the highest.
                    let top_rate = if from.per_second_f64() >= to.per_second_f64() {
                        from
                    } else {
                        to
                    };
                    let (from, to) = (from.per_second_f64(), to.per_second_f64());
                    let top = top_rate.per_second_f64();
                    loop {
                        poisson_clock += exponential_gap(top_rate, &mut rng);
                        if poisson_clock >= duration {
                            break;
                        }
                        let rate = from + (to - from) * poisson_clock / duration;
                        if rng.random::<f64>() * top < rate {
                            break;
                        }
                    }
                    poisson_clock.floor()
                }
                Shape::Uniform { rate } => {
                    let exact = u128::from(index) * u128::from(rate.period_micros())
                        / u128::from(rate.permits());
                    exact as f64
                }
                Shape::Burst { size, every } => (index / size).saturating_mul(*every) as f64,
            };
            if t >= duration {
                return None;
            }
            let key = match self.shape {
                Shape::Poisson { .. } | Shape::Ramp { .. } => rng.random_range(0..self.keys.max(1)),
                _ => index % self.keys,
            };
            index += 1;
            Some((t as Micros, key))
        })
    }
}

/// An exponential gap in microseconds, of mean `1 / rate`.
fn exponential_gap(rate: &Rate, rng: &mut ChaCha8Rng) -> f64 {
    let per_micro = rate.per_second_f64() / 1e6;
    // A rate is positive and finite, so the distribution always exists.
    Exp::new(per_micro).map_or(f64::INFINITY, |exp| exp.sample(rng))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(spec: &str, seed: u64) -> Result<Vec<Micros>, String> {
        Ok(TrafficSpec::parse(spec)?
            .events(seed)
            .map(|e| e.t)
            .collect())
    }

    #[test]
    fn uniform_is_evenly_spaced() -> Result<(), String> {
        assert_eq!(
            times("uniform:rate=3/s,duration=1s", 0)?,
            [0, 333_333, 666_666]
        );
        Ok(())
    }

    #[test]
    fn bursts_come_together() -> Result<(), String> {
        assert_eq!(
            times("burst:size=2,every=5s,duration=11s", 0)?,
            [0, 0, 5_000_000, 5_000_000, 10_000_000, 10_000_000]
        );
        Ok(())
    }

    #[test]
    fn poisson_is_seeded_ordered_and_about_the_rate() -> Result<(), String> {
        let a = times("poisson:rate=100/s,duration=100s", 3)?;
        assert_eq!(a, times("poisson:rate=100/s,duration=100s", 3)?);
        assert_ne!(a, times("poisson:rate=100/s,duration=100s", 4)?);
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
        assert!(a.iter().all(|t| *t < 100_000_000));
        // 10 000 expected; a Poisson count's standard deviation is 100.
        assert!((9_500..10_500).contains(&a.len()), "{}", a.len());
        Ok(())
    }

    #[test]
    fn a_ramp_rises_linearly() -> Result<(), String> {
        // 0 to 200 a second over 100 s: 10 000 arrivals expected, a quarter of them in the
        // first half (the area under the line), in time order.
        let a = times("ramp:from=1/s,to=200/s,duration=100s", 5)?;
        assert_eq!(a, times("ramp:from=1/s,to=200/s,duration=100s", 5)?);
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
        assert!((9_700..10_400).contains(&a.len()), "{}", a.len());
        let first_half = a.iter().filter(|t| **t < 50_000_000).count() as f64;
        let share = first_half / a.len() as f64;
        assert!((0.23..0.28).contains(&share), "{share}");
        // Falling works too: then most come early.
        let down = times("ramp:from=200/s,to=1/s,duration=100s", 5)?;
        let early = down.iter().filter(|t| **t < 50_000_000).count() as f64;
        assert!(early / down.len() as f64 > 0.7);
        Ok(())
    }

    #[test]
    fn keys_and_permits() -> Result<(), String> {
        let spec = TrafficSpec::parse("uniform:rate=10/s,duration=1s,keys=3,permits=2")?;
        let keys: Vec<String> = spec.events(0).map(|e| e.key).take(4).collect();
        assert_eq!(keys, ["k0", "k1", "k2", "k0"]);
        assert!(spec.events(0).all(|e| e.permits == 2));
        Ok(())
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_generators_never_panic(text in ".{0,48}", seed in 0u64..4) {
            if let Ok(spec) = TrafficSpec::parse(&text) {
                let _ = spec.events(seed).take(100).count();
            }
        }

        #[test]
        fn extreme_generators_stay_ordered(
            name in proptest::sample::select(vec!["poisson", "uniform", "burst", "ramp"]),
            rate in "[1-9][0-9]{0,6}/(1us|s|1000000h)",
            every in "[1-9][0-9]{0,18}us",
            duration in "[1-9][0-9]{0,18}us",
        ) {
            let text = match name {
                "burst" => format!("burst:size=3,every={every},duration={duration}"),
                "ramp" => format!("ramp:from={rate},to=1/s,duration={duration}"),
                _ => format!("{name}:rate={rate},duration={duration}"),
            };
            if let Ok(spec) = TrafficSpec::parse(&text) {
                let times: Vec<Micros> = spec.events(1).take(200).map(|e| e.t).collect();
                proptest::prop_assert!(times.windows(2).all(|w| w[0] <= w[1]));
            }
        }
    }

    #[test]
    fn bad_generators_name_the_problem() {
        for (text, needle) in [
            ("zipf:rate=1/s", "unknown traffic"),
            ("poisson:duration=1s", "rate"),
            ("poisson:rate=1/s", "duration"),
            ("poisson:rate=1/s,duration=1s,speed=2", "speed"),
            ("burst:every=1s,duration=2s", "size"),
            ("burst:size=0,every=1s,duration=2s", "size"),
            ("uniform:rate=1/s,duration=0s", "duration"),
            ("uniform:rate=1/s,duration=1s,keys=x", "keys"),
            ("ramp:to=1/s,duration=1s", "missing parameter `from`"),
            ("ramp:from=1/s,to=x,duration=1s", "bad to"),
        ] {
            let err = TrafficSpec::parse(text).expect_err(text);
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
