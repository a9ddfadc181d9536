//! The Lua code, twice: as one Redis Functions library (Redis 7+), loaded once per server and
//! called with `FCALL`, and as `EVALSHA` scripts for servers without Functions. Redis runs a
//! script's whole body on every `EVALSHA`, building a closure for every function it defines;
//! a library's body runs once, at `FUNCTION LOAD`, so a call runs only its own code.

use std::sync::LazyLock;

use redis::Script;

/// The code every entry point builds on.
macro_rules! lua {
    ($($file:literal),* $(,)?) => {
        concat!($(include_str!(concat!("../lua/", $file))),*)
    };
}

/// Every algorithm, the multi-limit entry point and leasing: the library's core and the
/// `EVALSHA` decide and lease scripts alike.
macro_rules! decide_lua {
    () => {
        lua!(
            "prelude.lua",
            "bucket_prelude.lua",
            "gcra.lua",
            "leaky.lua",
            "concurrency.lua",
            "fixed_window.lua",
            "windows.lua",
            "decide.lua",
            "lease.lua",
        )
    };
}

/// The library's code without its header, which names it after a hash of this.
const LIBRARY_BODY: &str = concat!(
    decide_lua!(),
    lua!(
        "one_gcra.lua",
        "one_fixed_window.lua",
        "batch.lua",
        "config.lua",
        "functions.lua"
    ),
);

/// An entry point of the Lua code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// Any set of limits, all or nothing (`decide.lua`).
    Decide,
    /// A lease of permits of a set of limits taken or given back (`lease.lua`).
    Lease,
    /// One GCRA limit or token bucket, with fewer arguments and reply values (`one_gcra.lua`).
    OneGcra,
    /// One fixed window (`one_fixed_window.lua`).
    OneFixedWindow,
    /// Several one-limit decisions of the two entries above, each on its own (`batch.lua`).
    Batch,
    /// A Redisson-style limiter's configuration (`config.lua`).
    Config,
}

/// The entry points that decide one limit alone, which a batch (`batch.lua`) also runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OneEntry {
    /// `one_gcra.lua`: GCRA, and the token bucket, which decides as GCRA does.
    Gcra,
    /// `one_fixed_window.lua`.
    FixedWindow,
}

impl OneEntry {
    /// The entry point a call of its own goes to.
    pub(crate) fn entry(self) -> Entry {
        match self {
            OneEntry::Gcra => Entry::OneGcra,
            OneEntry::FixedWindow => Entry::OneFixedWindow,
        }
    }

    /// How `batch.lua` names it.
    pub(crate) fn batch_code(self) -> &'static str {
        match self {
            OneEntry::Gcra => "g",
            OneEntry::FixedWindow => "f",
        }
    }
}

const ENTRIES: [(Entry, &str); 6] = [
    (Entry::Decide, "decide"),
    (Entry::Lease, "lease"),
    (Entry::OneGcra, "one_gcra"),
    (Entry::OneFixedWindow, "one_fixed_window"),
    (Entry::Batch, "batch"),
    (Entry::Config, "config"),
];

/// The library as `FUNCTION LOAD` takes it, and its functions' names in [`ENTRIES`] order.
pub(crate) struct Library {
    pub(crate) code: String,
    names: Vec<String>,
}

/// Named after a hash of its code, so servers shared by several versions of this crate hold
/// each version's library side by side.
pub(crate) static LIBRARY: LazyLock<Library> = LazyLock::new(|| {
    let hash = Script::new(LIBRARY_BODY).get_hash().to_owned();
    let name = format!("sluicegate_{}", &hash[..16]);
    Library {
        code: format!("#!lua name={name}\nlocal FUNCTION_PREFIX = \"{name}_\"\n{LIBRARY_BODY}"),
        names: ENTRIES
            .iter()
            .map(|(_, entry)| format!("{name}_{entry}"))
            .collect(),
    }
});

/// Every algorithm and the multi-limit entry point, for `EVALSHA`.
static DECIDE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(concat!(decide_lua!(), "return decide_all(KEYS, ARGV)\n")));

/// Leases, for `EVALSHA`: the decide script's code, entered at `lease`.
static LEASE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(concat!(decide_lua!(), "return lease(KEYS, ARGV)\n")));

/// One GCRA limit in a script holding GCRA alone: each `EVALSHA` builds only its closures.
static ONE_GCRA_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        lua!(
            "prelude.lua",
            "bucket_prelude.lua",
            "gcra.lua",
            "one_gcra.lua"
        ),
        "return one_gcra(KEYS, ARGV)\n"
    ))
});

/// One fixed window alone, as [`ONE_GCRA_SCRIPT`].
static ONE_FIXED_WINDOW_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        lua!("prelude.lua", "fixed_window.lua", "one_fixed_window.lua"),
        "return one_fixed_window(KEYS, ARGV)\n"
    ))
});

/// Batches of one-limit decisions: GCRA and fixed window, without the other algorithms.
static BATCH_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        lua!(
            "prelude.lua",
            "bucket_prelude.lua",
            "gcra.lua",
            "fixed_window.lua",
            "one_gcra.lua",
            "one_fixed_window.lua",
            "batch.lua"
        ),
        "return batch(KEYS, ARGV)\n"
    ))
});

/// The configuration script of Redisson-style limiters.
static CONFIG_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(concat!(lua!("config.lua"), "return config(KEYS, ARGV)\n")));

impl Entry {
    /// The name `FCALL` calls it by.
    pub(crate) fn function(self) -> &'static str {
        let index = ENTRIES
            .iter()
            .position(|(entry, _)| *entry == self)
            .unwrap_or(0);
        &LIBRARY.names[index]
    }

    /// The script `EVALSHA` runs.
    pub(crate) fn script(self) -> &'static Script {
        match self {
            Entry::Decide => &DECIDE_SCRIPT,
            Entry::Lease => &LEASE_SCRIPT,
            Entry::OneGcra => &ONE_GCRA_SCRIPT,
            Entry::OneFixedWindow => &ONE_FIXED_WINDOW_SCRIPT,
            Entry::Batch => &BATCH_SCRIPT,
            Entry::Config => &CONFIG_SCRIPT,
        }
    }
}
