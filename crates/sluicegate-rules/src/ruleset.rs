//! Loading rule files into a [`RuleSet`]: a file or a directory, every error collected.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::ser::{SerializeSeq, SerializeStruct};

use crate::error::{LoadErrors, Report, RuleError, RuleErrorKind};
use crate::raw::read_file;
use crate::resolve::{DomainTree, Level, load_descriptors};
use crate::rule::Rule;
use crate::yaml;

/// How rule files are combined.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoadOptions {
    /// Files naming the same domain are merged (envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG`);
    /// off by default, when a second file for a domain is an error.
    pub merge_domains: bool,
}

impl LoadOptions {
    /// Options with domain merging on or off.
    pub fn merge_domains(mut self, merge: bool) -> LoadOptions {
        self.merge_domains = merge;
        self
    }
}

/// Validated rules from one or more files, ready for matching.
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    pub(crate) domains: Vec<DomainTree>,
    /// Looked up for every request: hashed with foldhash, not SipHash.
    pub(crate) by_name: HashMap<String, usize, foldhash::fast::RandomState>,
    warnings: Vec<RuleError>,
    rule_count: usize,
}

impl RuleSet {
    /// Loads a rule file, or every `*.yaml` / `*.yml` file directly inside a directory (in
    /// name order; subdirectories and other files are not read). All problems of all files
    /// are reported together, each with its file and, where it has one, line and column.
    pub fn load(path: &Path, options: &LoadOptions) -> Result<RuleSet, LoadErrors> {
        let io_error = |err: std::io::Error| {
            LoadErrors::new(vec![RuleError {
                file: path.to_owned(),
                position: None,
                kind: RuleErrorKind::Io {
                    message: err.to_string(),
                },
            }])
        };
        let files = if path.is_dir() {
            let mut files = Vec::new();
            for entry in std::fs::read_dir(path).map_err(io_error)? {
                let file = entry.map_err(io_error)?.path();
                let is_rule_file = file
                    .extension()
                    .is_some_and(|ext| ext == "yaml" || ext == "yml");
                if is_rule_file && file.is_file() {
                    files.push(file);
                }
            }
            files.sort();
            files
        } else {
            vec![path.to_owned()]
        };
        let mut sources = Vec::new();
        let mut errors = Vec::new();
        for file in files {
            match std::fs::read_to_string(&file) {
                Ok(text) => sources.push((file, text)),
                Err(err) => errors.push(RuleError {
                    file,
                    position: None,
                    kind: RuleErrorKind::Io {
                        message: err.to_string(),
                    },
                }),
            }
        }
        match RuleSet::from_sources(&sources, options) {
            Ok(rules) if errors.is_empty() => Ok(rules),
            Ok(_) => Err(LoadErrors::new(errors)),
            Err(more) => {
                errors.extend(more.errors().iter().cloned());
                Err(LoadErrors::new(errors))
            }
        }
    }

    /// Loads rules from texts, each named by the file it came from (in that order).
    pub fn from_sources(
        sources: &[(PathBuf, String)],
        options: &LoadOptions,
    ) -> Result<RuleSet, LoadErrors> {
        let mut set = RuleSet::default();
        let mut errors = Vec::new();
        for (file, text) in sources {
            let mut report = Report::new(file.clone());
            set.add_file(text, options, &mut report);
            // Shape errors are found before meaning errors; a reader wants them in file order.
            report.errors.sort_by_key(|e| e.position);
            errors.append(&mut report.errors);
            set.warnings.append(&mut report.warnings);
        }
        if errors.is_empty() {
            let mut next = 0;
            for domain in &mut set.domains {
                number_rules(&mut domain.root, &mut next);
            }
            set.rule_count = next;
            Ok(set)
        } else {
            Err(LoadErrors::new(errors))
        }
    }

    /// How many rules there are, in every domain: one more than the largest
    /// [`Rule::index`](crate::Rule::index).
    pub fn rule_count(&self) -> usize {
        self.rule_count
    }

    fn add_file(&mut self, text: &str, options: &LoadOptions, report: &mut Report) {
        let root = match yaml::parse(text) {
            Ok(root) => root,
            Err(err) => {
                report.at(
                    err.pos,
                    RuleErrorKind::Syntax {
                        message: err.message,
                    },
                );
                return;
            }
        };
        let raw = read_file(root.as_ref(), report);
        let domain = raw.domain.as_ref().filter(|d| !d.value.is_empty());
        let Some(domain) = domain else {
            if raw.domain_unreadable {
                return;
            }
            let pos = raw
                .domain
                .as_ref()
                .map_or(crate::yaml::Position { line: 1, column: 1 }, |d| d.pos);
            report.at(pos, RuleErrorKind::EmptyDomain);
            return;
        };
        let name = domain.value.clone();
        let parent_key = format!("{name}.");
        match self.by_name.get(&name) {
            Some(&index) if options.merge_domains => {
                let tree = &mut self.domains[index];
                load_descriptors(&mut tree.root, &parent_key, raw.descriptors, report);
            }
            Some(&index) => {
                report.at(
                    domain.pos,
                    RuleErrorKind::DuplicateDomain {
                        domain: name,
                        first: self.domains[index].file.display().to_string(),
                    },
                );
            }
            None => {
                let mut root = Level::default();
                load_descriptors(&mut root, &parent_key, raw.descriptors, report);
                self.by_name.insert(name.clone(), self.domains.len());
                self.domains.push(DomainTree {
                    name,
                    file: report.file.clone(),
                    root,
                });
            }
        }
    }

    /// Things that load but are probably mistakes (a known key in a place where it means
    /// nothing, which envoyproxy/ratelimit also ignores).
    pub fn warnings(&self) -> &[RuleError] {
        &self.warnings
    }

    /// The domains, in the order they were loaded.
    pub fn domains(&self) -> impl Iterator<Item = &str> {
        self.domains.iter().map(|d| d.name.as_str())
    }

    /// Whether `domain` is loaded.
    pub fn has_domain(&self, domain: &str) -> bool {
        self.by_name.contains_key(domain)
    }

    /// Every rule of a domain, depth first in file order.
    pub fn rules(&self, domain: &str) -> Vec<&Rule> {
        let mut rules = Vec::new();
        if let Some(&index) = self.by_name.get(domain) {
            collect_rules(&self.domains[index].root, &mut rules);
        }
        rules
    }

    /// True when no domain is loaded.
    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }
}

/// Numbers the rules under `level` from `next` on, in [`collect_rules`]'s order.
fn number_rules(level: &mut Level, next: &mut usize) {
    for key in &level.order {
        if let Some(node) = level.children.get_mut(key) {
            if let Some(rule) = &mut node.rule {
                rule.index = *next;
                *next += 1;
            }
            number_rules(&mut node.level, next);
        }
    }
}

fn collect_rules<'a>(level: &'a Level, out: &mut Vec<&'a Rule>) {
    for key in &level.order {
        if let Some(node) = level.children.get(key) {
            out.extend(node.rule.as_ref());
            collect_rules(&node.level, out);
        }
    }
}

/// One line per rule, `domain.key_value: unit=SECOND requests_per_unit=5, shadow_mode: false`
/// (envoyproxy/ratelimit's dump format, with Sluicegate's extensions appended).
impl fmt::Display for RuleSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for domain in &self.domains {
            for rule in self.rules(&domain.name) {
                writeln!(f, "{rule}")?;
            }
        }
        Ok(())
    }
}

/// `[{"domain": ..., "rules": [Rule, ...]}, ...]`, for `GET /rlconfig` and `check-config --json`.
impl serde::Serialize for RuleSet {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct DomainDump<'a>(&'a str, Vec<&'a Rule>);
        impl serde::Serialize for DomainDump<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut out = s.serialize_struct("Domain", 2)?;
                out.serialize_field("domain", self.0)?;
                out.serialize_field("rules", &self.1)?;
                out.end()
            }
        }
        let mut seq = serializer.serialize_seq(Some(self.domains.len()))?;
        for domain in &self.domains {
            seq.serialize_element(&DomainDump(&domain.name, self.rules(&domain.name)))?;
        }
        seq.end()
    }
}
