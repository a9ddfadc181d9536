//! The admin page in a real headless browser: Debian's `chromium`, driven over WebDriver by
//! `chromedriver` (both from apt: `chromium chromium-driver`; `scripts/test.sh` installs them).
//! The page loads without a console error, shows the numbers of the traffic sent, and its
//! switch puts a rule in shadow so the next over-limit call answers OK. The test saves a
//! screenshot of the page after the traffic: into the build's temporary directory, or, with
//! `SLUICEGATE_UPDATE_SCREENSHOT=1`, over `docs/admin-page.png`, the one the README shows
//! (every run's latencies differ, so a plain test run leaves the repository alone).

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::http::Method;
use fantoccini::wd::{Capabilities, WebDriverCompatibleCommand};
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use sluicegate_server::serve::EngineOptions;
use url::{ParseError, Url};

mod loopback;

use loopback::{BoxError, OK, OVER_LIMIT, Service, TestResult};

const RULES: &str = r#"
domain: shop
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 8}
"#;

/// The rule switched to shadow, as `/rlconfig` and the page name it.
const RULE: &str = "shop.user";

/// The seconds of load before the test's own calls: the page's whole window.
const SECONDS: usize = 300;

/// A bound on every wait: generous, so a loaded machine never trips it.
const WAIT: Duration = Duration::from_secs(20);

/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(100);

/// The size of the page, and so of the screenshot.
const WIDTH: u32 = 1280;
const HEIGHT: u32 = 900;

/// What the service answered, per rule and per second of the manual clock: (allowed, denied).
struct Answers {
    user: Vec<(u64, u64)>,
    path: Vec<(u64, u64)>,
}

impl Answers {
    /// One call in second `second` on `key` (`user` or `path`); its code.
    async fn call(
        &mut self,
        service: &mut Service,
        second: usize,
        key: &str,
        value: &str,
    ) -> Result<i32, BoxError> {
        let code = service.code(&[&[(key, value)]]).await?;
        let tally = match key {
            "user" => &mut self.user[second],
            _ => &mut self.path[second],
        };
        match code {
            OK => tally.0 += 1,
            OVER_LIMIT => tally.1 += 1,
            other => return Err(format!("{key}={value}: code {other}").into()),
        }
        Ok(code)
    }

    /// The numbers the page should show for `rule`: (name, value) by `data-testid` suffix.
    fn expected(&self, rule: &str) -> Vec<(String, String)> {
        let tally = if rule == "shop.user" {
            &self.user
        } else {
            &self.path
        };
        let last = tally[tally.len() - 1];
        let minute = tally[tally.len() - 60..]
            .iter()
            .fold((0, 0), |(a, d), (a1, d1)| (a + a1, d + d1));
        [
            ("allowed-1s", last.0),
            ("denied-1s", last.1),
            ("shadow-1s", 0),
            ("allowed-60s", minute.0),
            ("denied-60s", minute.1),
            ("shadow-60s", 0),
        ]
        .into_iter()
        .map(|(name, n)| (format!("rule-{rule}-{name}"), n.to_string()))
        .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_the_traffic_and_its_switch_shadows_a_rule() -> TestResult {
    // First, so that a machine without chromium fails at once, saying what to install.
    let driver = ChromeDriver::start().await?;
    let mut service = Service::start(RULES, EngineOptions::default()).await?;
    let mut answers = Answers {
        user: vec![(0, 0); SECONDS],
        path: vec![(0, 0); SECONDS],
    };
    // Five minutes of load, a manual second at a time: users spending their 5 an hour, a
    // path over its 8 a second in some seconds.
    for second in 0..SECONDS {
        if second > 0 {
            service.clock.advance(Duration::from_secs(1));
        }
        for _ in 0..3 + (second * 5) % 9 {
            answers.call(&mut service, second, "path", "/cart").await?;
        }
        if second + 1 < SECONDS {
            let user = format!("u{}", second % 37);
            for _ in 0..1 + (second * second) % 4 {
                answers.call(&mut service, second, "user", &user).await?;
            }
        }
    }
    // The last second, ann's alone on the user rule: 5 allowed, 2 denied.
    let now = SECONDS - 1;
    for call in 1..=7 {
        let expected = if call <= 5 { OK } else { OVER_LIMIT };
        let code = answers.call(&mut service, now, "user", "ann").await?;
        assert_eq!(code, expected, "ann's call {call}");
    }
    assert_eq!(answers.user[now], (5, 2));

    let browser = driver.session().await?;
    // The session is closed (and the browser quits) however the test ends.
    let outcome = drive(&browser, &mut service, &answers).await;
    let closed = browser.close().await;
    drop(driver);
    outcome?;
    closed?;
    service.server.shutdown().await?;
    Ok(())
}

async fn drive(browser: &Client, service: &mut Service, answers: &Answers) -> TestResult {
    let mut log = BrowserLog::default();
    browser.goto(&service.admin_url("/")?).await?;

    // Each rule's numbers, in the last second and over the last minute, as the service
    // answered the calls.
    for rule in ["shop.user", "shop.path"] {
        for (id, expected) in answers.expected(rule) {
            wait_for_text(browser, &id, &expected).await?;
        }
    }
    wait_for_class(browser, &format!("mode-{RULE}-enforce"), "on").await?;
    log.read_and_check(browser, "after the page showed the traffic")
        .await?;

    fit_viewport(browser).await?;
    let png = browser.screenshot().await?;
    let saved = if std::env::var_os("SLUICEGATE_UPDATE_SCREENSHOT").is_some() {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/admin-page.png")
    } else {
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("admin-page.png")
    };
    std::fs::write(&saved, png)?;

    // The switch: shadow, from the page.
    click(browser, &format!("mode-{RULE}-shadow")).await?;
    wait_for_class(browser, &format!("mode-{RULE}-shadow"), "on").await?;
    let modes: Value = serde_json::from_str(
        &service
            .http
            .get(service.admin_url("/admin/mode")?)
            .send()
            .await?
            .text()
            .await?,
    )?;
    assert_eq!(modes[RULE], "shadow", "GET /admin/mode: {modes}");
    // ann is over her limit: in shadow she is answered OK, and the page counts her call as
    // shadow-denied.
    assert_eq!(
        service.code(&[&[("user", "ann")]]).await?,
        OK,
        "an over-limit call in shadow"
    );
    wait_for_text(browser, &format!("rule-{RULE}-shadow-1s"), "1").await?;
    wait_for_text(browser, &format!("rule-{RULE}-denied-1s"), "2").await?;
    log.read_and_check(browser, "after the switch to shadow")
        .await?;
    Ok(())
}

/// Sizes the window so that the page (and so the screenshot) is `WIDTH` by `HEIGHT`: the
/// window is larger by the browser's own frame, which headless Chromium emulates too.
async fn fit_viewport(browser: &Client) -> TestResult {
    let frame = browser
        .execute(
            "return [window.outerWidth - window.innerWidth, window.outerHeight - window.innerHeight];",
            vec![],
        )
        .await?;
    let extra = |i: usize| {
        frame[i]
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| format!("the window's frame: {frame}"))
    };
    browser
        .set_window_size(WIDTH + extra(0)?, HEIGHT + extra(1)?)
        .await?;
    Ok(())
}

/// The element of `data-testid` `id`, if the page shows it.
async fn by_test_id(
    browser: &Client,
    id: &str,
) -> Result<Option<fantoccini::elements::Element>, BoxError> {
    match browser
        .find(Locator::Css(&format!(r#"[data-testid="{id}"]"#)))
        .await
    {
        Ok(element) => Ok(Some(element)),
        Err(error) if error.is_no_such_element() => Ok(None),
        Err(error) => Err(error.into()),
    }
}

/// Waits (bounded) until the element `id` reads `expected`. The page redraws every second,
/// so the element is looked up afresh each time.
async fn wait_for_text(browser: &Client, id: &str, expected: &str) -> TestResult {
    let deadline = Instant::now() + WAIT;
    let mut seen = None;
    loop {
        if let Some(element) = by_test_id(browser, id).await? {
            match element.text().await {
                Ok(text) if text.trim() == expected => return Ok(()),
                Ok(text) => seen = Some(text),
                Err(error) if error.is_stale_element_reference() => {}
                Err(error) => return Err(error.into()),
            }
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "after {WAIT:?}, [data-testid={id}] shows {seen:?}, expected {expected:?}"
            )
            .into());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits (bounded) until the element `id` has the class `class`.
async fn wait_for_class(browser: &Client, id: &str, class: &str) -> TestResult {
    let deadline = Instant::now() + WAIT;
    let mut seen = None;
    loop {
        if let Some(element) = by_test_id(browser, id).await? {
            match element.attr("class").await {
                Ok(classes) => {
                    if classes
                        .as_deref()
                        .is_some_and(|all| all.split_whitespace().any(|c| c == class))
                    {
                        return Ok(());
                    }
                    seen = classes;
                }
                Err(error) if error.is_stale_element_reference() => {}
                Err(error) => return Err(error.into()),
            }
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "after {WAIT:?}, [data-testid={id}] has the classes {seen:?}, not {class:?}"
            )
            .into());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Clicks the element `id`, looking again (bounded) if the page redrew it meanwhile.
async fn click(browser: &Client, id: &str) -> TestResult {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(element) = by_test_id(browser, id).await? {
            match element.click().await {
                Ok(()) => return Ok(()),
                Err(error) if error.is_stale_element_reference() => {}
                Err(error) => return Err(error.into()),
            }
        }
        if Instant::now() >= deadline {
            return Err(format!("after {WAIT:?}, could not click [data-testid={id}]").into());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The browser's console, as chromedriver keeps it (`goog:loggingPrefs`): every entry read so
/// far; any `SEVERE` one (an error, a failed load, a content security policy violation) fails
/// the test.
#[derive(Default)]
struct BrowserLog {
    entries: Vec<Value>,
}

impl BrowserLog {
    /// Reads the entries logged since the last read; fails on a severe one.
    async fn read_and_check(&mut self, browser: &Client, when: &str) -> TestResult {
        let read = browser.issue_cmd(ReadBrowserLog).await?;
        let entries = read
            .as_array()
            .ok_or_else(|| format!("the browser log is not a list: {read}"))?;
        self.entries.extend(entries.iter().cloned());
        let severe: Vec<&Value> = self
            .entries
            .iter()
            .filter(|entry| entry["level"] == "SEVERE")
            .collect();
        if severe.is_empty() {
            Ok(())
        } else {
            Err(format!("console errors {when}: {severe:#?}").into())
        }
    }
}

/// chromedriver's `POST /session/{id}/se/log` for the `browser` log: the entries since the
/// last read.
#[derive(Debug)]
struct ReadBrowserLog;

impl WebDriverCompatibleCommand for ReadBrowserLog {
    fn endpoint(&self, base_url: &Url, session_id: Option<&str>) -> Result<Url, ParseError> {
        let session = session_id.ok_or(ParseError::EmptyHost)?;
        base_url.join(&format!("session/{session}/se/log"))
    }

    fn method_and_body(&self, _: &Url) -> (Method, Option<String>) {
        (Method::POST, Some(json!({"type": "browser"}).to_string()))
    }
}

/// A `chromedriver` on a free loopback port, killed (with the browsers it started) on drop.
struct ChromeDriver {
    child: Child,
    port: u16,
    chromium: PathBuf,
    /// The browser's fresh profile and chromedriver's log.
    dir: tempfile::TempDir,
}

impl ChromeDriver {
    /// Starts chromedriver and waits (bounded) until it is ready. Fails, with what to install,
    /// if chromium or chromedriver is missing.
    async fn start() -> Result<ChromeDriver, BoxError> {
        let chromedriver = on_path("chromedriver")?;
        let chromium = on_path("chromium")?;
        let dir = tempfile::tempdir()?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let log = File::create(dir.path().join("chromedriver.log"))?;
        let mut command = Command::new(&chromedriver);
        command
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        // Its own process group, so that drop ends the browsers it started with it.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command.spawn()?;
        let mut driver = ChromeDriver {
            child,
            port,
            chromium,
            dir,
        };
        let status = format!("http://127.0.0.1:{port}/status");
        let http = reqwest::Client::new();
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(exit) = driver.child.try_wait()? {
                return Err(format!(
                    "{} exited ({exit}) before it was ready: {}",
                    chromedriver.display(),
                    driver.log()
                )
                .into());
            }
            if let Ok(answer) = http.get(&status).send().await {
                let text = answer.text().await.unwrap_or_default();
                if let Ok(json) = serde_json::from_str::<Value>(&text) {
                    if json["value"]["ready"] == true {
                        return Ok(driver);
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{} not ready after {WAIT:?}: {}",
                    chromedriver.display(),
                    driver.log()
                )
                .into());
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// A session of headless Chromium, its console logged, on a fresh profile.
    async fn session(&self) -> Result<Client, BoxError> {
        let profile = self.dir.path().join("profile");
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": self.chromium,
                "args": [
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--disable-quic",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    format!("--window-size={WIDTH},{HEIGHT}"),
                    format!("--user-data-dir={}", profile.display()),
                ],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        });
        let Value::Object(capabilities) = capabilities else {
            return Err("capabilities are an object".into());
        };
        let capabilities: Capabilities = capabilities;
        let webdriver = format!("http://127.0.0.1:{}", self.port);
        let connect = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&webdriver)
            .await;
        match connect {
            Ok(client) => Ok(client),
            Err(error) => Err(format!(
                "no browser session from {webdriver}: {error}; {}",
                self.log()
            )
            .into()),
        }
    }

    /// chromedriver's output, for an error message.
    fn log(&self) -> String {
        let log =
            std::fs::read_to_string(self.dir.path().join("chromedriver.log")).unwrap_or_default();
        format!("chromedriver's log:\n{log}")
    }
}

impl Drop for ChromeDriver {
    fn drop(&mut self) {
        // The whole group (chromedriver and any browser left running), then chromedriver.
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `program` on the `PATH`; an error naming the packages to install if it is not there.
fn on_path(program: &str) -> Result<PathBuf, BoxError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| {
            format!(
                "the admin page test needs `{program}` on the PATH: install Debian's `chromium` \
                 and `chromium-driver` (apt-get install chromium chromium-driver; \
                 scripts/test.sh does)"
            )
            .into()
        })
}
