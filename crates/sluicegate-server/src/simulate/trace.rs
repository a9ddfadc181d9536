//! Reading a CSV trace line by line: `t,key,permits,op`, a header line and `#` comments allowed.

use crate::simulate::event::{Event, EventOp, parse_seconds};

/// What one line of a trace holds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TraceLine {
    /// A blank line, a comment or the header: no output.
    Skip,
    Event(Event),
    /// A line that is not an event; `t` when it could be read.
    Bad {
        t: Option<u64>,
        error: String,
    },
}

/// Reads the lines of one trace, in order (it needs to know whether a header may still come).
#[derive(Debug, Default)]
pub(crate) struct TraceReader {
    seen_content: bool,
}

impl TraceReader {
    pub(crate) fn read(&mut self, line: &str) -> TraceLine {
        let line = line.trim_end_matches(['\n', '\r']);
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            return TraceLine::Skip;
        }
        let first_content = !self.seen_content;
        self.seen_content = true;
        let fields = match split_csv(line) {
            Ok(fields) => fields,
            Err(error) => return TraceLine::Bad { t: None, error },
        };
        let field = |i: usize| fields.get(i).map(|f| f.trim()).unwrap_or("");
        if first_content && field(0).eq_ignore_ascii_case("t") {
            return TraceLine::Skip;
        }
        let t = match parse_seconds(field(0)) {
            Ok(t) => t,
            Err(e) => {
                return TraceLine::Bad {
                    t: None,
                    error: format!("bad t `{}`: {e}", field(0)),
                };
            }
        };
        let bad = |error: String| TraceLine::Bad { t: Some(t), error };
        if fields.len() > 4 {
            return bad(format!(
                "{} fields, expected at most 4: t,key,permits,op",
                fields.len()
            ));
        }
        let permits = match field(2) {
            "" => 1,
            text => match text.parse::<u64>() {
                Ok(0) => return bad("permits must be at least 1".into()),
                Ok(n) => n,
                Err(_) => return bad(format!("bad permits `{text}`: expected a whole number")),
            },
        };
        match EventOp::parse(field(3)) {
            Ok(op) => TraceLine::Event(Event {
                t,
                key: field(1).to_owned(),
                permits,
                op,
            }),
            Err(error) => bad(error),
        }
    }
}

/// Splits a CSV line; a field may be double-quoted, with `""` for a quote inside it.
fn split_csv(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        let mut field = String::new();
        while chars.peek().is_some_and(|c| *c == ' ') {
            chars.next();
        }
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                    None => return Err("unterminated quoted field".into()),
                }
            }
            while chars.peek().is_some_and(|c| *c != ',') {
                if chars.next().is_some_and(|c| !c.is_whitespace()) {
                    return Err("text after a closing quote".into());
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| *c != ',') {
                field.push(c);
            }
        }
        fields.push(field);
        if chars.next().is_none() {
            return Ok(fields);
        }
    }
}

#[cfg(test)]
mod tests {
    use sluicegate::state_machine::Op;

    use super::*;

    fn event(t: u64, key: &str, permits: u64, op: EventOp) -> TraceLine {
        TraceLine::Event(Event {
            t,
            key: key.into(),
            permits,
            op,
        })
    }

    #[test]
    fn reads_events_headers_and_comments() {
        let mut reader = TraceReader::default();
        let check = EventOp::Decide(Op::Check, "check".into());
        assert_eq!(reader.read("# a comment\n"), TraceLine::Skip);
        assert_eq!(reader.read("t,key,permits,op\r\n"), TraceLine::Skip);
        assert_eq!(reader.read(""), TraceLine::Skip);
        assert_eq!(
            reader.read("0.2,a,1,check"),
            event(200_000, "a", 1, check.clone())
        );
        assert_eq!(reader.read("0.3,b"), event(300_000, "b", 1, check.clone()));
        assert_eq!(
            reader.read("1, \"x,\"\"y\" ,3,peek"),
            event(
                1_000_000,
                "x,\"y",
                3,
                EventOp::Decide(Op::Peek, "peek".into())
            )
        );
        assert!(matches!(
            reader.read("t,key,permits,op"),
            TraceLine::Bad { t: None, .. }
        ));
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_lines_never_panic(lines in proptest::collection::vec(".{0,40}", 0..6)) {
            let mut reader = TraceReader::default();
            for line in &lines {
                let _ = reader.read(line);
            }
        }

        #[test]
        fn event_shaped_lines_never_panic(
            t in "[0-9]{0,22}(\\.[0-9]{0,8})?",
            key in "[a-z\"]{0,3}",
            permits in "[0-9]{0,21}",
            op in "(check|peek|acquire|release|try:|set_rate:|x)[0-9./smh]{0,8}",
        ) {
            let _ = TraceReader::default().read(&format!("{t},{key},{permits},{op}"));
        }
    }

    #[test]
    fn bad_lines_say_why() {
        let mut reader = TraceReader::default();
        for (line, t, needle) in [
            ("x,a", None, "bad t"),
            ("1,a,0", Some(1_000_000), "at least 1"),
            ("1,a,two", Some(1_000_000), "permits"),
            ("1,a,1,jump", Some(1_000_000), "unknown op"),
            ("1,a,1,check,5", Some(1_000_000), "fields"),
            ("1,\"a", None, "unterminated"),
        ] {
            match reader.read(line) {
                TraceLine::Bad { t: got, error } => {
                    assert_eq!(got, t, "{line}");
                    assert!(error.contains(needle), "{line}: {error}");
                }
                other => panic!("{line}: {other:?}"),
            }
        }
    }
}
