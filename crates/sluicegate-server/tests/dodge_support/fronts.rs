//! What stands between a client and the limiting proxy in the tests of `client_ip`: nothing,
//! trusted proxies the test plays itself, a real nginx, or a real `sluicegate proxy`.

use std::net::IpAddr;

use super::{exchange, field, lo, nginx_http, request};
use crate::proxy_support::raw_upstream::RawUpstream;
use crate::proxy_support::{BoxError, Nginx, PASS_ALL, ProxyProcess};

/// The forwarding field `client_ip` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    XForwardedFor,
    Forwarded,
}

impl Field {
    pub fn name(self) -> &'static str {
        match self {
            Field::XForwardedFor => "X-Forwarded-For",
            Field::Forwarded => "Forwarded",
        }
    }

    /// The element an appending proxy writes for a request from `client`.
    pub fn element(self, client: IpAddr) -> String {
        match (self, client) {
            (Field::XForwardedFor, ip) => ip.to_string(),
            (Field::Forwarded, IpAddr::V4(v4)) => format!("for={v4}"),
            (Field::Forwarded, IpAddr::V6(v6)) => format!("for=\"[{v6}]\""),
        }
    }
}

/// What stands between the client and the limiting proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Front {
    /// Nothing: the client connects to it (the field is not to be read at all).
    Direct,
    /// One trusted proxy (127.0.0.1), played by the test: it connects from 127.0.0.1 and
    /// writes the field as an appending proxy does, the client's lines joined, then the
    /// client's address.
    OneProxy,
    /// Two trusted proxies played: the second (127.0.0.2) appends the first (127.0.0.1).
    TwoProxies,
    /// A real nginx with `proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for` (and
    /// the same for `Forwarded`, by a `map`).
    Nginx,
    /// A real `sluicegate proxy`, which appends to both fields itself.
    Sluicegate,
}

impl Front {
    pub const ALL: [Front; 5] = [
        Front::Direct,
        Front::OneProxy,
        Front::TwoProxies,
        Front::Nginx,
        Front::Sluicegate,
    ];

    /// A number of its own, in the addresses of its clients.
    pub fn number(self) -> u8 {
        match self {
            Front::Direct => 1,
            Front::OneProxy => 2,
            Front::TwoProxies => 3,
            Front::Nginx => 4,
            Front::Sluicegate => 5,
        }
    }
}

/// The trusted proxies: 127.0.0.1 and 127.0.0.2, listed one by one (every other 127.x
/// address is a client).
pub const PROXY_1: IpAddr = lo(0, 0, 1);
pub const PROXY_2: IpAddr = lo(0, 0, 2);

/// The limiting proxy, and the real proxies that can stand in front of it.
pub struct ClientIpStage {
    field: Field,
    _upstream: RawUpstream,
    limited: ProxyProcess,
    nginx: Nginx,
    front: ProxyProcess,
}

impl ClientIpStage {
    pub async fn start(field: Field, spec: &str) -> Result<ClientIpStage, BoxError> {
        let upstream = RawUpstream::start().await?;
        let header = match field {
            Field::XForwardedFor => "x-forwarded-for",
            Field::Forwarded => "forwarded",
        };
        let rules = format!(
            "client_ip:\n  header: {header}\n  trusted_proxies: [{PROXY_1}, {PROXY_2}]\n\
             limits:\n  per_client: {{ key: client_ip, spec: \"{spec}\" }}\n\
             routes:\n  - {{ prefix: /, limits: [per_client] }}\n"
        );
        let limited = ProxyProcess::start(&upstream.url(), &rules, &[])?;
        // nginx appends to X-Forwarded-For by its own variable, and to Forwarded by a map
        // (nginx 1.22's `$http_forwarded` is the first field line only).
        let nginx = Nginx::start(&nginx_http(
            limited.address,
            r#"
map $http_forwarded $proxy_add_forwarded {
    "" "for=$remote_addr";
    default "$http_forwarded, for=$remote_addr";
}
server {
    listen LISTEN;
    location / {
        proxy_pass http://app;
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        proxy_set_header Forwarded $proxy_add_forwarded;
    }
}
"#,
        ))?;
        let front = ProxyProcess::start(&limited.url(""), PASS_ALL, &[])?;
        Ok(ClientIpStage {
            field,
            _upstream: upstream,
            limited,
            nginx,
            front,
        })
    }

    /// The field's value as appending proxies pass it on: the client's lines joined, then
    /// each proxy's element.
    fn appended(&self, lines: &[Vec<u8>], elements: &[IpAddr]) -> Vec<u8> {
        let mut value = lines.join(&b", "[..]);
        for (i, address) in elements.iter().enumerate() {
            if i > 0 || !lines.is_empty() {
                value.extend_from_slice(b", ");
            }
            value.extend_from_slice(self.field.element(*address).as_bytes());
        }
        value
    }

    /// One request from `client` through `front`, with the field lines the client wrote;
    /// the status it got.
    pub async fn send(
        &self,
        front: Front,
        client: IpAddr,
        lines: &[Vec<u8>],
    ) -> Result<u16, BoxError> {
        let name = self.field.name();
        let as_written: Vec<Vec<u8>> = lines.iter().map(|line| field(name, line)).collect();
        let (from, to, fields) = match front {
            Front::Direct => (client, self.limited.address, as_written),
            Front::OneProxy => {
                let value = self.appended(lines, &[client]);
                (PROXY_1, self.limited.address, vec![field(name, &value)])
            }
            Front::TwoProxies => {
                let value = self.appended(lines, &[client, PROXY_1]);
                (PROXY_2, self.limited.address, vec![field(name, &value)])
            }
            Front::Nginx => (client, self.nginx.address, as_written),
            Front::Sluicegate => (client, self.front.address, as_written),
        };
        let mut all: Vec<&[u8]> = vec![b"Host: dodge.test"];
        all.extend(fields.iter().map(Vec::as_slice));
        Ok(exchange(from, to, &request(b"/", &all)).await?.status)
    }

    /// `count` requests from `client` through `front`, one after the other.
    pub async fn statuses(
        &self,
        front: Front,
        client: IpAddr,
        lines: &[Vec<u8>],
        count: usize,
    ) -> Result<Vec<u16>, BoxError> {
        let mut statuses = Vec::with_capacity(count);
        for _ in 0..count {
            statuses.push(self.send(front, client, lines).await?);
        }
        Ok(statuses)
    }

    pub fn logs(&self) -> String {
        format!(
            "limiting proxy's log:\n{}\nfront proxy's log:\n{}\nnginx:\n{}",
            tail(&self.limited.log_text()),
            tail(&self.front.log_text()),
            self.nginx.errors()
        )
    }
}

/// The last lines of a log, enough to see why without drowning the failures.
pub fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
