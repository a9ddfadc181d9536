//! A YAML document as a tree whose every node knows its line and column (public for other
//! position-keeping rule files, such as the proxy's), built from the
//! `yaml-rust2` event stream (its own `Yaml` tree drops positions, and semantic errors such as
//! an unknown key deep inside a descriptor must point at the key).

use std::fmt;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// A place in a rule file: 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize)]
pub struct Position {
    /// Line, counted from 1.
    pub line: usize,
    /// Column, counted from 1.
    pub column: usize,
}

impl Position {
    fn from_marker(mark: Marker) -> Position {
        // yaml-rust2 counts lines from 1 and columns from 0.
        Position {
            line: mark.line(),
            column: mark.col() + 1,
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// A scalar as YAML 1.2's core schema resolves it (quoted scalars are always strings).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Scalar {
    /// `null`, `~` or nothing.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A floating-point number, as written.
    Float(String),
    /// Any other scalar, and every quoted one.
    Str(String),
}

/// A YAML value.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Value {
    /// A scalar.
    Scalar(Scalar),
    /// A list.
    Seq(Vec<Node>),
    /// A map: entries in file order (rule files are small; a linear scan is fine).
    Map(Vec<(Node, Node)>),
}

/// A value with the position where it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// The value.
    pub value: Value,
    /// Where it starts.
    pub pos: Position,
    /// A scalar as written (yaml.v2 decodes `True` or `0x1F` into a string field as written).
    pub text: String,
}

impl Node {
    /// A short description of the node for error messages (`a list`, `the number 0.25`, ...).
    pub fn describe(&self) -> String {
        match &self.value {
            Value::Scalar(Scalar::Null) => "null".to_owned(),
            Value::Scalar(Scalar::Bool(b)) => format!("the boolean {b}"),
            Value::Scalar(Scalar::Int(i)) => format!("the integer {i}"),
            Value::Scalar(Scalar::Float(text)) => format!("the number {text}"),
            Value::Scalar(Scalar::Str(text)) => format!("the string '{text}'"),
            Value::Seq(_) => "a list".to_owned(),
            Value::Map(_) => "a map".to_owned(),
        }
    }
}

/// A syntax error, with where the parser stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} at {pos}")]
pub struct SyntaxError {
    /// What the parser found wrong.
    pub message: String,
    /// Where.
    pub pos: Position,
}

/// The deepest nesting of lists and maps a rule file may have: far more than any rule file
/// needs (a level of descriptors is two), as deep as YAML's flow collections may go in the
/// parser anyway, and shallow enough that the tree (dropped recursively) and the recursive
/// passes over descriptors stay far from the end of a thread's stack.
pub const MAX_DEPTH: usize = 256;

/// Parses the first document of `text`. An empty stream is `None`.
pub fn parse(text: &str) -> Result<Option<Node>, SyntaxError> {
    let mut builder = TreeBuilder::default();
    let mut parser = Parser::new_from_str(text);
    // The parser's own `load` recurses once per level of nesting, so a line of `- - - ...`
    // would overflow the stack: its events are taken one by one instead.
    loop {
        let (event, mark) = parser.next_token().map_err(|err| SyntaxError {
            message: err.info().to_owned(),
            pos: Position::from_marker(*err.marker()),
        })?;
        if matches!(event, Event::DocumentEnd | Event::StreamEnd) {
            break;
        }
        builder.on_event(event, mark);
        if builder.stack.len() > MAX_DEPTH {
            return Err(SyntaxError {
                message: format!("lists and maps nested more than {MAX_DEPTH} levels deep"),
                pos: Position::from_marker(mark),
            });
        }
    }
    if let Some(pos) = builder.alias_at {
        return Err(SyntaxError {
            message: "anchors and aliases are not supported in rule files".to_owned(),
            pos,
        });
    }
    Ok(builder.root)
}

/// The position of a value left empty, until it is known whose value it is.
const IMPLICIT: Position = Position { line: 0, column: 0 };

enum Open {
    Seq(Position, Vec<Node>),
    Map(Position, Vec<(Node, Node)>, Option<Node>),
}

#[derive(Default)]
struct TreeBuilder {
    stack: Vec<Open>,
    root: Option<Node>,
    alias_at: Option<Position>,
}

impl TreeBuilder {
    fn push_node(&mut self, mut node: Node) {
        match self.stack.last_mut() {
            None => {
                if node.pos == IMPLICIT {
                    node.pos = Position { line: 1, column: 1 };
                }
                if self.root.is_none() {
                    self.root = Some(node);
                }
            }
            Some(Open::Seq(pos, items)) => {
                if node.pos == IMPLICIT {
                    node.pos = *pos;
                }
                items.push(node);
            }
            Some(Open::Map(pos, entries, pending_key)) => match pending_key.take() {
                None => {
                    if node.pos == IMPLICIT {
                        node.pos = *pos;
                    }
                    *pending_key = Some(node);
                }
                Some(key) => {
                    let mut value = node;
                    if value.pos == IMPLICIT {
                        value.pos = key.pos;
                    }
                    entries.push((key, value));
                }
            },
        }
    }
}

impl MarkedEventReceiver for TreeBuilder {
    fn on_event(&mut self, event: Event, mark: Marker) {
        let pos = Position::from_marker(mark);
        match event {
            Event::Scalar(text, style, _, tag) => {
                // An empty value (`name:`) is marked where the next token starts; it is
                // placed at its key instead.
                let pos = if text.is_empty() && style == TScalarStyle::Plain {
                    IMPLICIT
                } else {
                    pos
                };
                let scalar = if style == TScalarStyle::Plain && tag.is_none() {
                    resolve_plain(&text)
                } else {
                    Scalar::Str(text.clone())
                };
                self.push_node(Node {
                    value: Value::Scalar(scalar),
                    pos,
                    text,
                });
            }
            Event::SequenceStart(..) => self.stack.push(Open::Seq(pos, Vec::new())),
            Event::MappingStart(..) => self.stack.push(Open::Map(pos, Vec::new(), None)),
            Event::SequenceEnd | Event::MappingEnd => {
                let node = match self.stack.pop() {
                    Some(Open::Seq(pos, items)) => Node {
                        value: Value::Seq(items),
                        pos,
                        text: String::new(),
                    },
                    // The parser marks a block map's start after its first key; the first
                    // key is where a reader sees the map begin.
                    Some(Open::Map(pos, entries, _)) => Node {
                        pos: entries.first().map_or(pos, |(key, _)| key.pos),
                        value: Value::Map(entries),
                        text: String::new(),
                    },
                    None => return,
                };
                self.push_node(node);
            }
            Event::Alias(_) => {
                self.alias_at.get_or_insert(pos);
                self.push_node(Node {
                    value: Value::Scalar(Scalar::Null),
                    pos,
                    text: String::new(),
                });
            }
            _ => {}
        }
    }
}

fn resolve_plain(text: &str) -> Scalar {
    match yaml_rust2::Yaml::from_str(text) {
        yaml_rust2::Yaml::Null => Scalar::Null,
        yaml_rust2::Yaml::Boolean(b) => Scalar::Bool(b),
        yaml_rust2::Yaml::Integer(i) => Scalar::Int(i),
        yaml_rust2::Yaml::Real(text) => Scalar::Float(text),
        _ => Scalar::Str(text.to_owned()),
    }
}

/// A value and where it was written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Spanned<T> {
    pub(crate) value: T,
    pub(crate) pos: Position,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based() -> Result<(), Box<dyn std::error::Error>> {
        let root = parse("a: 1\nb:\n  - c: x\n")?.ok_or("empty")?;
        let Value::Map(entries) = root.value else {
            return Err("not a map".into());
        };
        assert_eq!(entries[0].0.pos, Position { line: 1, column: 1 });
        assert_eq!(entries[1].0.pos, Position { line: 2, column: 1 });
        let Value::Seq(items) = &entries[1].1.value else {
            return Err("not a list".into());
        };
        let Value::Map(inner) = &items[0].value else {
            return Err("not a map".into());
        };
        assert_eq!(inner[0].0.pos, Position { line: 3, column: 5 });
        Ok(())
    }

    #[test]
    fn quoted_scalars_stay_strings() -> Result<(), Box<dyn std::error::Error>> {
        let root = parse("a: '5'\nb: 5\nc: 0.25\nd:\n")?.ok_or("empty")?;
        let Value::Map(entries) = root.value else {
            return Err("not a map".into());
        };
        let values: Vec<_> = entries.into_iter().map(|(_, v)| v.value).collect();
        assert_eq!(
            values,
            vec![
                Value::Scalar(Scalar::Str("5".into())),
                Value::Scalar(Scalar::Int(5)),
                Value::Scalar(Scalar::Float("0.25".into())),
                Value::Scalar(Scalar::Null),
            ]
        );
        Ok(())
    }

    #[test]
    fn syntax_errors_have_a_position() {
        let err = parse("'''\n").err();
        assert!(err.is_some_and(|e| e.pos.line >= 1));
    }
}
