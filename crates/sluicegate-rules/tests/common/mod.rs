//! Helpers shared by the rule tests.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};

use sluicegate_rules::{LoadErrors, LoadOptions, RuleSet};

/// The shared corpus of envoyproxy/ratelimit rule files; a missing corpus fails the test.
pub fn corpus() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/envoy-configs");
    assert!(
        path.join("README.md").is_file(),
        "the rule-file corpus is missing: expected it at {} (shared/envoy-configs beside the \
         project's root)",
        path.display()
    );
    path.canonicalize().expect("the corpus path resolves")
}

/// Loads one corpus file or directory (relative to the corpus root).
pub fn load_corpus(relative: &str, options: &LoadOptions) -> Result<RuleSet, LoadErrors> {
    RuleSet::load(&corpus().join(relative), options)
}

/// Loads one YAML text named `test.yaml`.
pub fn rules(yaml: &str) -> Result<RuleSet, LoadErrors> {
    RuleSet::from_sources(
        &[(PathBuf::from("test.yaml"), yaml.to_owned())],
        &LoadOptions::default(),
    )
}

/// The errors of a YAML text that must not load.
pub fn errors(yaml: &str) -> Vec<String> {
    match rules(yaml) {
        Ok(_) => panic!("expected errors for:\n{yaml}"),
        Err(errors) => errors.errors().iter().map(ToString::to_string).collect(),
    }
}
