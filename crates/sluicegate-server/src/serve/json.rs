//! The JSON form of `RateLimitRequest` / `RateLimitResponse`, as protobuf's JSON mapping writes
//! them (what envoyproxy/ratelimit's `POST /json` takes and gives): camelCase names (snake_case
//! accepted too), enums by name, 64-bit numbers as numbers or strings, durations as `"1.5s"`.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Unexpected, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use crate::serve::protocol::{
    CallError, CallVerdict, DescriptorCall, EnvoyUnit, LimitOverride, RateLimitCall,
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonRequest {
    #[serde(default)]
    domain: String,
    #[serde(default)]
    descriptors: Vec<JsonDescriptor>,
    #[serde(default, alias = "hitsAddend", deserialize_with = "hits_addend")]
    hits_addend: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonDescriptor {
    #[serde(default)]
    entries: Vec<JsonEntry>,
    #[serde(default)]
    limit: Option<JsonOverride>,
    #[serde(default, alias = "hitsAddend", deserialize_with = "hits_addend")]
    hits_addend: Option<u64>,
    #[serde(default, alias = "isNegativeHits")]
    is_negative_hits: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonEntry {
    key: String,
    #[serde(default)]
    value: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonOverride {
    #[serde(alias = "requestsPerUnit", deserialize_with = "requests_per_unit")]
    requests_per_unit: Option<u64>,
    unit: JsonUnit,
}

/// A unit by name or by number. Read by hand rather than as an untagged enum, whose error for a
/// value of neither kind ("data did not match any variant") says nothing of what is expected.
#[derive(Debug)]
enum JsonUnit {
    Name(String),
    Number(i32),
}

impl<'de> Deserialize<'de> for JsonUnit {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<JsonUnit, D::Error> {
        deserializer.deserialize_any(UnitVisitor)
    }
}

struct UnitVisitor;

impl Visitor<'_> for UnitVisitor {
    type Value = JsonUnit;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("unit as a name (SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR) or a number")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<JsonUnit, E> {
        Ok(JsonUnit::Name(name.to_owned()))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<JsonUnit, E> {
        i32::try_from(n)
            .map(JsonUnit::Number)
            .map_err(|_| E::invalid_value(Unexpected::Signed(n), &self))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<JsonUnit, E> {
        i32::try_from(n)
            .map(JsonUnit::Number)
            .map_err(|_| E::invalid_value(Unexpected::Unsigned(n), &self))
    }
}

fn hits_addend<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    deserializer.deserialize_option(NumberVisitor("hits_addend"))
}

fn requests_per_unit<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    deserializer.deserialize_option(NumberVisitor("requests_per_unit"))
}

/// Protobuf's JSON mapping writes 64-bit integers as strings and reads either form, also
/// wrapped as a `UInt64Value` (`{"value": ...}`). Read by hand rather than as an untagged enum,
/// so that a value of none of these forms is an error naming the field and what it takes.
#[derive(Clone, Copy)]
struct NumberVisitor(&'static str);

impl<'de> Visitor<'de> for NumberVisitor {
    type Value = Option<u64>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} as a non-negative integer (a number or a string)",
            self.0
        )
    }

    fn visit_none<E: de::Error>(self) -> Result<Option<u64>, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Option<u64>, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<u64>, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Option<u64>, E> {
        Ok(Some(n))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Option<u64>, E> {
        u64::try_from(n)
            .map(Some)
            .map_err(|_| E::invalid_value(Unexpected::Signed(n), &self))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Option<u64>, E> {
        text.parse().map(Some).map_err(|_| {
            E::custom(format!(
                "{}: expected a non-negative integer, got {text:?}",
                self.0
            ))
        })
    }

    /// `{"value": N}`; other keys are ignored, as they were before (a derived struct).
    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Option<u64>, A::Error> {
        let mut value = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == "value" {
                if value.is_some() {
                    return Err(de::Error::duplicate_field("value"));
                }
                value = Some(map.next_value_seed(Wrapped(self))?);
            } else {
                map.next_value::<de::IgnoredAny>()?;
            }
        }
        value
            .map(Some)
            .ok_or_else(|| de::Error::missing_field("value"))
    }
}

/// The number inside `{"value": ...}`: not null, but itself any of the forms.
struct Wrapped(NumberVisitor);

impl<'de> de::DeserializeSeed<'de> for Wrapped {
    type Value = u64;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<u64, D::Error> {
        let visitor = self.0;
        deserializer
            .deserialize_any(visitor)?
            .ok_or_else(|| de::Error::invalid_type(Unexpected::Unit, &visitor))
    }
}

/// Reads a JSON request body into a call (validated).
pub fn call_from_json(body: &[u8]) -> Result<RateLimitCall, CallError> {
    let request: JsonRequest =
        serde_json::from_slice(body).map_err(|e| CallError::Malformed(e.to_string()))?;
    let mut descriptors = Vec::with_capacity(request.descriptors.len());
    for (index, descriptor) in request.descriptors.into_iter().enumerate() {
        if descriptor.is_negative_hits {
            return Err(CallError::Malformed(format!(
                "descriptor {index}: is_negative_hits (refunds) is not supported"
            )));
        }
        let limit_override = match descriptor.limit {
            None => None,
            Some(o) => {
                let unit = match &o.unit {
                    JsonUnit::Name(name) => EnvoyUnit::from_proto_name(name),
                    JsonUnit::Number(n) => EnvoyUnit::from_proto_number(*n),
                }
                .ok_or_else(|| {
                    let unit = match &o.unit {
                        JsonUnit::Name(name) => format!("{name:?}"),
                        JsonUnit::Number(n) => n.to_string(),
                    };
                    CallError::Malformed(format!("descriptor {index}: unknown limit unit {unit}"))
                })?;
                let requests = o.requests_per_unit.unwrap_or(0);
                let requests_per_unit = u32::try_from(requests).map_err(|_| {
                    CallError::Malformed(format!(
                        "descriptor {index}: requests_per_unit {requests} exceeds 2^32 - 1"
                    ))
                })?;
                Some(LimitOverride {
                    requests_per_unit,
                    unit,
                })
            }
        };
        let entries = descriptor
            .entries
            .into_iter()
            .map(|e| (e.key, e.value))
            .collect();
        descriptors.push(DescriptorCall::new(
            entries,
            descriptor.hits_addend,
            request.hits_addend,
            limit_override,
        ));
    }
    RateLimitCall::new(request.domain, descriptors)
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonResponse {
    overall_code: &'static str,
    statuses: Vec<JsonStatus>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    response_headers_to_add: Vec<JsonHeader>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonStatus {
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_limit: Option<JsonLimit>,
    #[serde(skip_serializing_if = "is_zero")]
    limit_remaining: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_until_reset: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonLimit {
    #[serde(skip_serializing_if = "String::is_empty")]
    name: String,
    #[serde(skip_serializing_if = "is_zero")]
    requests_per_unit: u32,
    unit: &'static str,
}

#[derive(Debug, Serialize)]
struct JsonHeader {
    key: String,
    value: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A duration as protobuf's JSON mapping writes it: seconds with 0, 3, 6 or 9 decimals.
pub fn proto_json_duration(duration: Duration) -> String {
    let (secs, nanos) = (duration.as_secs(), duration.subsec_nanos());
    if nanos == 0 {
        format!("{secs}s")
    } else if nanos % 1_000_000 == 0 {
        format!("{secs}.{:03}s", nanos / 1_000_000)
    } else if nanos % 1_000 == 0 {
        format!("{secs}.{:06}s", nanos / 1_000)
    } else {
        format!("{secs}.{nanos:09}s")
    }
}

/// Writes a verdict as the JSON form of `RateLimitResponse`.
pub fn verdict_to_json(verdict: &CallVerdict) -> serde_json::Value {
    let response = JsonResponse {
        overall_code: verdict.overall.proto_name(),
        statuses: verdict
            .statuses
            .iter()
            .map(|s| JsonStatus {
                code: s.code.proto_name(),
                current_limit: s.current_limit.as_ref().map(|l| JsonLimit {
                    name: l.name.clone(),
                    requests_per_unit: l.requests_per_unit,
                    unit: l.unit.proto_name(),
                }),
                limit_remaining: s.limit_remaining,
                duration_until_reset: s.duration_until_reset.map(proto_json_duration),
            })
            .collect(),
        response_headers_to_add: verdict
            .headers
            .iter()
            .map(|(key, value)| JsonHeader {
                key: key.clone(),
                value: value.clone(),
            })
            .collect(),
    };
    serde_json::to_value(response).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_spellings_and_string_numbers() -> Result<(), CallError> {
        let call = call_from_json(
            br#"{"domain":"d","hitsAddend":2,"descriptors":[
                {"entries":[{"key":"k","value":"v"}]},
                {"entries":[{"key":"a"}],"hits_addend":"7","limit":{"requestsPerUnit":5,"unit":"second"}}]}"#,
        )?;
        assert_eq!(call.descriptors[0].hits, 2);
        assert_eq!(call.descriptors[1].hits, 7);
        assert_eq!(
            call.descriptors[1].entries,
            vec![("a".to_owned(), String::new())]
        );
        assert_eq!(
            call.descriptors[1].limit_override,
            Some(LimitOverride {
                requests_per_unit: 5,
                unit: EnvoyUnit::Second
            })
        );
        Ok(())
    }

    #[test]
    fn names_what_is_wrong() {
        let err = call_from_json(br#"{"domain":"d","descriptors":[],"bogus":1}"#)
            .expect_err("unknown field");
        assert!(err.to_string().contains("bogus"), "{err}");
        let err = call_from_json(br#"{"domain":"","descriptors":[{"entries":[{"key":"k"}]}]}"#)
            .expect_err("empty domain");
        assert_eq!(err, CallError::EmptyDomain);
        let err = call_from_json(br#"{"domain":"d"}"#).expect_err("no descriptors");
        assert_eq!(err, CallError::NoDescriptors);
        let err = call_from_json(b"{not json").expect_err("syntax");
        assert!(matches!(err, CallError::Malformed(_)));
        let err = call_from_json(br#"{"domain":"d","hits_addend":-1,"descriptors":[]}"#)
            .expect_err("negative");
        assert!(matches!(err, CallError::Malformed(_)));
    }

    #[test]
    fn durations_as_protobuf_writes_them() {
        assert_eq!(proto_json_duration(Duration::from_secs(52)), "52s");
        assert_eq!(proto_json_duration(Duration::from_millis(1500)), "1.500s");
        assert_eq!(
            proto_json_duration(Duration::from_micros(1_000_001)),
            "1.000001s"
        );
    }
}
