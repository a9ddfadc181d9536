//! Key names: `PREFIX{TAG}NAME[SUFFIX]`. Everything between the braces decides the Redis
//! Cluster slot, so all keys of one request (same tag) land on one node and one script can
//! update them atomically.

use sluicegate::ConfigError;

/// How a limiter's keys are named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyScheme {
    prefix: Vec<u8>,
}

impl KeyScheme {
    /// Keys starting with `prefix` (which must not contain braces: they would move the tag).
    pub(crate) fn new(prefix: &str) -> Result<Self, ConfigError> {
        if prefix.contains(['{', '}']) {
            return Err(ConfigError::InvalidParameter {
                name: "prefix",
                value: prefix.to_owned(),
                reason: "must not contain `{` or `}` (they delimit the cluster hash tag)".into(),
            });
        }
        Ok(KeyScheme {
            prefix: prefix.as_bytes().to_vec(),
        })
    }

    /// The key of limit `name` for `tag`, with `suffix` (which starts with `:` if non-empty).
    pub(crate) fn key(&self, tag: &[u8], name: &[u8], suffix: &str) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.prefix.len() + tag.len() + name.len() + 8);
        key.extend_from_slice(&self.prefix);
        key.push(b'{');
        escape_into(&mut key, tag);
        key.push(b'}');
        escape_into(&mut key, name);
        key.extend_from_slice(suffix.as_bytes());
        key
    }
}

/// Percent-escapes the bytes that delimit tags and suffixes, so that any bytes make a key and
/// two different (tag, name) pairs never make the same key. The runs between escaped bytes
/// are copied whole, not a byte at a time: a key is built on every decision.
fn escape_into(out: &mut Vec<u8>, mut bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    while let Some(at) = bytes
        .iter()
        .position(|b| matches!(b, b'%' | b'{' | b'}' | b':'))
    {
        out.extend_from_slice(&bytes[..at]);
        let b = bytes[at];
        out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        bytes = &bytes[at + 1..];
    }
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_hold_any_bytes_and_stay_distinct() -> Result<(), ConfigError> {
        let keys = KeyScheme::new("rl:")?;
        assert_eq!(keys.key(b"user-1", b"api", ""), b"rl:{user-1}api".to_vec());
        assert_eq!(
            keys.key(b"a}b{", b"x:y", ":l"),
            b"rl:{a%7Db%7B}x%3Ay:l".to_vec()
        );
        assert_ne!(keys.key(b"a", b"b:l", ""), keys.key(b"a", b"b", ":l"));
        assert_eq!(keys.key(&[0, 255], b"", ""), b"rl:{\x00\xff}".to_vec());
        assert_eq!(
            keys.key(b"%%", b"::x:", ""),
            b"rl:{%25%25}%3A%3Ax%3A".to_vec()
        );
        assert!(KeyScheme::new("bad{").is_err());
        Ok(())
    }
}
