//! Every file of envoyproxy/ratelimit's own test corpus (shared/envoy-configs) loads, or is
//! rejected with the error envoyproxy/ratelimit gives, at the right file, line and column.

mod common;

use std::path::{Path, PathBuf};

use common::{corpus, load_corpus};
use sluicegate_rules::{LoadOptions, RuleErrorKind, RuleSet};

fn subdirectories(dir: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("readable directory")
        .map(|entry| entry.expect("readable entry").path())
        .filter(|path| path.is_dir())
        .collect();
    dirs.sort();
    dirs
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("readable directory")
        .map(|entry| entry.expect("readable entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_file_outside_invalid_loads_alone_and_with_its_directory() {
    let root = corpus();
    let mut loaded = 0;
    let mut dirs = Vec::new();
    for dir in subdirectories(&root) {
        if dir.file_name().is_some_and(|n| n == "invalid") {
            continue;
        }
        dirs.push(dir.clone());
        dirs.extend(subdirectories(&dir));
    }
    for dir in dirs {
        for file in yaml_files(&dir) {
            let rules = RuleSet::load(&file, &LoadOptions::default())
                .unwrap_or_else(|e| panic!("{} must load:\n{e}", file.display()));
            assert_eq!(rules.domains().count(), 1, "{}", file.display());
            assert!(rules.warnings().is_empty(), "{}", file.display());
            loaded += 1;
        }
        if let Err(e) = RuleSet::load(&dir, &LoadOptions::default()) {
            panic!("{} must load as a directory:\n{e}", dir.display());
        }
    }
    assert!(loaded >= 30, "only {loaded} corpus files found");
}

struct Expected {
    dir: &'static str,
    file: &'static str,
    line: usize,
    column: usize,
    check: fn(&RuleErrorKind) -> bool,
}

const EXPECTED: &[Expected] = &[
    Expected {
        dir: "bad_limit_unit",
        file: "bad_limit_unit.yaml",
        line: 6,
        column: 13,
        check: |k| matches!(k, RuleErrorKind::InvalidUnit { unit } if unit == "foo"),
    },
    Expected {
        dir: "bad_yaml",
        file: "bad_yaml.yaml",
        line: 1,
        column: 1,
        check: |k| matches!(k, RuleErrorKind::Syntax { .. }),
    },
    Expected {
        dir: "duplicate_domain",
        file: "duplicate_domain.yaml",
        line: 1,
        column: 9,
        check: |k| {
            matches!(k, RuleErrorKind::DuplicateDomain { domain, first }
            if domain == "test-domain" && first.ends_with("basic_config.yaml"))
        },
    },
    Expected {
        dir: "duplicate_key",
        file: "duplicate_key.yaml",
        line: 6,
        column: 5,
        check: |k| {
            matches!(k, RuleErrorKind::DuplicateDescriptor { composite }
            if composite == "test-domain.key1_value1")
        },
    },
    Expected {
        dir: "duplicate_key_nested",
        file: "duplicate_key_nested.yaml",
        line: 12,
        column: 9,
        check: |k| {
            matches!(k, RuleErrorKind::DuplicateDescriptor { composite }
            if composite == "test-domain.key1_value1.subkey1")
        },
    },
    Expected {
        dir: "empty_domain",
        file: "empty_domain.yaml",
        line: 1,
        column: 1,
        check: |k| matches!(k, RuleErrorKind::EmptyDomain),
    },
    Expected {
        dir: "empty_key",
        file: "empty_key.yaml",
        line: 3,
        column: 5,
        check: |k| matches!(k, RuleErrorKind::EmptyKey),
    },
    Expected {
        dir: "merge_domain_without_merge",
        file: "merge_domain_key2.yaml",
        line: 2,
        column: 9,
        check: |k| matches!(k, RuleErrorKind::DuplicateDomain { domain, .. } if domain == "test-domain"),
    },
    Expected {
        dir: "missing_unit",
        file: "missing_unit.yaml",
        line: 7,
        column: 7,
        check: |k| matches!(k, RuleErrorKind::InvalidUnit { unit } if unit.is_empty()),
    },
    Expected {
        dir: "misspelled_key",
        file: "misspelled_key.yaml",
        line: 5,
        column: 5,
        check: |k| matches!(k, RuleErrorKind::UnknownKey { key, .. } if key == "ratelimit"),
    },
    Expected {
        dir: "misspelled_key2",
        file: "misspelled_key2.yaml",
        line: 7,
        column: 7,
        check: |k| matches!(k, RuleErrorKind::UnknownKey { key, .. } if key == "requestsperunit"),
    },
    Expected {
        dir: "non_map_list",
        file: "non_map_list.yaml",
        line: 3,
        column: 5,
        check: |k| matches!(k, RuleErrorKind::NonMapListItem { item } if item == "a"),
    },
    Expected {
        dir: "non_string_key",
        file: "non_string_key.yaml",
        line: 1,
        column: 1,
        check: |k| matches!(k, RuleErrorKind::NonStringKey { key } if key == "0.25"),
    },
    Expected {
        dir: "replaces_empty",
        file: "replaces_empty.yaml",
        line: 10,
        column: 15,
        check: |k| matches!(k, RuleErrorKind::EmptyReplaces),
    },
    Expected {
        dir: "replaces_self",
        file: "replaces_self.yaml",
        line: 10,
        column: 21,
        check: |k| matches!(k, RuleErrorKind::ReplacesSelf),
    },
    Expected {
        dir: "share_threshold_without_wildcard",
        file: "share_threshold_without_wildcard.yaml",
        line: 7,
        column: 5,
        check: |k| matches!(k, RuleErrorKind::ShareThresholdWithoutWildcard { key } if key == "files_exact"),
    },
    Expected {
        dir: "unknown_top_level_key",
        file: "unknown_top_level_key.yaml",
        line: 4,
        column: 1,
        check: |k| matches!(k, RuleErrorKind::UnknownKey { key, .. } if key == "ratelimits"),
    },
    Expected {
        dir: "unlimited_with_unit",
        file: "unlimited_with_unit.yaml",
        line: 6,
        column: 13,
        check: |k| matches!(k, RuleErrorKind::UnitWhenUnlimited),
    },
];

#[test]
fn every_invalid_directory_is_rejected_with_the_expected_first_error() {
    let invalid = corpus().join("invalid");
    let dirs = subdirectories(&invalid);
    let names: Vec<String> = dirs
        .iter()
        .map(|d| d.file_name().expect("named").to_string_lossy().into_owned())
        .collect();
    let mut expected_names: Vec<&str> = EXPECTED.iter().map(|e| e.dir).collect();
    expected_names.sort_unstable();
    assert_eq!(
        names, expected_names,
        "every invalid case has an expectation"
    );

    for case in EXPECTED {
        let dir = invalid.join(case.dir);
        let errors = match RuleSet::load(&dir, &LoadOptions::default()) {
            Ok(_) => panic!("invalid/{} must be rejected", case.dir),
            Err(errors) => errors,
        };
        for error in errors.errors() {
            assert!(
                error.file.starts_with(&dir),
                "{error} names a file of invalid/{}",
                case.dir
            );
            assert!(
                error
                    .to_string()
                    .starts_with(&error.file.display().to_string())
            );
        }
        let first = &errors.errors()[0];
        assert_eq!(first.file, dir.join(case.file), "{first}");
        let position = first.position.expect("the error has a position");
        assert_eq!(
            (position.line, position.column),
            (case.line, case.column),
            "{first}"
        );
        assert!((case.check)(&first.kind), "unexpected error: {first}");
        assert!(
            first
                .to_string()
                .contains(&format!("{}:{}:{}: ", case.file, case.line, case.column)),
            "{first}"
        );
    }
}

#[test]
fn single_file_invalid_cases_are_rejected_alone_too() {
    let invalid = corpus().join("invalid");
    for dir in subdirectories(&invalid) {
        let files = yaml_files(&dir);
        if files.len() != 1 {
            continue;
        }
        assert!(
            RuleSet::load(&files[0], &LoadOptions::default()).is_err(),
            "{} must be rejected",
            files[0].display()
        );
    }
}

#[test]
fn several_mistakes_in_one_file_are_all_reported() -> Result<(), Box<dyn std::error::Error>> {
    let errors = match load_corpus("invalid/non_map_list", &LoadOptions::default()) {
        Ok(_) => return Err("must fail".into()),
        Err(errors) => errors,
    };
    let lines: Vec<usize> = errors
        .errors()
        .iter()
        .filter_map(|e| e.position.map(|p| p.line))
        .collect();
    assert_eq!(lines, vec![3, 4, 5]);
    Ok(())
}

#[test]
fn merge_domains_option_merges_files_of_one_domain() -> Result<(), Box<dyn std::error::Error>> {
    let merged = load_corpus(
        "invalid/merge_domain_without_merge",
        &LoadOptions::default().merge_domains(true),
    )?;
    let one = merged
        .find("test-domain", &[("key1", "value1")])
        .ok_or("key1 matches")?;
    assert_eq!(one.rule.limits[0].requests_per_unit, 10);
    let two = merged
        .find("test-domain", &[("key2", "value2")])
        .ok_or("key2 matches")?;
    assert_eq!(two.rule.limits[0].requests_per_unit, 20);

    // The upstream valid pair, merged the same way.
    let root = corpus();
    let sources: Vec<(PathBuf, String)> = [
        "valid/merge_domain_key1/merge_domain_key1.yaml",
        "valid/merge_domain_key2/merge_domain_key2.yaml",
    ]
    .iter()
    .map(|f| {
        (
            root.join(f),
            std::fs::read_to_string(root.join(f)).expect("readable"),
        )
    })
    .collect();
    assert!(RuleSet::from_sources(&sources, &LoadOptions::default()).is_err());
    let merged = RuleSet::from_sources(&sources, &LoadOptions::default().merge_domains(true))?;
    assert_eq!(merged.domains().count(), 1);
    Ok(())
}

#[test]
fn merging_still_rejects_a_descriptor_defined_twice() {
    let root = corpus();
    let file = root.join("valid/basic_config/basic_config.yaml");
    let text = std::fs::read_to_string(&file).expect("readable");
    let sources = vec![
        (file.clone(), text.clone()),
        (PathBuf::from("again.yaml"), text),
    ];
    let errors = RuleSet::from_sources(&sources, &LoadOptions::default().merge_domains(true))
        .expect_err("the same descriptors twice");
    assert!(
        errors
            .errors()
            .iter()
            .all(|e| e.file == Path::new("again.yaml"))
    );
    assert!(errors.errors().iter().any(|e| matches!(&e.kind,
        RuleErrorKind::DuplicateDescriptor { composite } if composite == "test-domain.key1_value1")));
}
