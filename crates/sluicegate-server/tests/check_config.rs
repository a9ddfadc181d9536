//! `sluicegate check-config` run as a program: valid rules print and exit 0, invalid ones
//! print every error as `file:line:column: message` and exit 1.

use std::path::{Path, PathBuf};
use std::process::Command;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn scratch_dir(name: &str) -> Result<PathBuf, std::io::Error> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn check_config(args: &[&std::ffi::OsStr]) -> Result<(i32, String, String), std::io::Error> {
    let output = Command::new(env!("CARGO_BIN_EXE_sluicegate"))
        .arg("check-config")
        .args(args)
        .env_remove("SLUICEGATE_MERGE_DOMAINS")
        .env_remove("SLUICEGATE_COUNT_DENIED")
        .output()?;
    Ok((
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

#[test]
fn a_valid_file_prints_its_rules_and_exits_0() -> TestResult {
    let dir = scratch_dir("check_config_valid")?;
    let file = dir.join("edge.yaml");
    std::fs::write(
        &file,
        "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: Second\n      requests_per_unit: 10\n",
    )?;
    let (code, stdout, stderr) = check_config(&[file.as_os_str()])?;
    assert_eq!(code, 0, "stderr: {stderr}");
    assert_eq!(
        stdout,
        "edge.remote_address: unit=SECOND requests_per_unit=10, shadow_mode: false\n"
    );
    assert!(stderr.is_empty(), "{stderr}");

    let (code, stdout, _) = check_config(&[file.as_os_str(), "--json".as_ref()])?;
    assert_eq!(code, 0);
    let json: serde_json::Value = serde_json::from_str(&stdout)?;
    assert_eq!(json[0]["domain"], "edge");
    assert_eq!(json[0]["rules"][0]["limits"][0]["requests_per_unit"], 10);
    Ok(())
}

#[test]
fn an_invalid_file_prints_every_error_and_exits_1() -> TestResult {
    let dir = scratch_dir("check_config_invalid")?;
    let file = dir.join("bad.yaml");
    std::fs::write(
        &file,
        "domain: edge\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n  - key: b\n    descriptors:\n      - key: c\n        rate_limt: {unit: second}\n",
    )?;
    let (code, stdout, stderr) = check_config(&[file.as_os_str()])?;
    assert_eq!(code, 1, "stdout: {stdout}");
    assert!(stdout.is_empty(), "{stdout}");
    let lines: Vec<&str> = stderr.lines().collect();
    let name = file.display().to_string();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert_eq!(
        lines[0],
        format!("{name}:5:13: invalid rate limit unit 'fortnight'")
    );
    assert!(
        lines[1].starts_with(&format!(
            "{name}:10:9: config error, unknown key 'rate_limt'"
        )),
        "{}",
        lines[1]
    );
    Ok(())
}

#[test]
fn domains_in_two_files_need_merge_domains() -> TestResult {
    let dir = scratch_dir("check_config_merge")?;
    for (file, key) in [("a.yaml", "one"), ("b.yaml", "two")] {
        std::fs::write(
            dir.join(file),
            format!(
                "domain: shared\ndescriptors:\n  - key: {key}\n    rate_limit: {{unit: minute, requests_per_unit: 5}}\n"
            ),
        )?;
    }
    let (code, _, stderr) = check_config(&[dir.as_os_str()])?;
    assert_eq!(code, 1);
    assert!(
        stderr.contains("b.yaml:1:9: duplicate domain 'shared'"),
        "{stderr}"
    );
    let (code, stdout, stderr) = check_config(&[dir.as_os_str(), "--merge-domains".as_ref()])?;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    Ok(())
}

#[test]
fn a_missing_path_is_an_error_naming_it() -> TestResult {
    let missing = Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-such-rules.yaml");
    let (code, _, stderr) = check_config(&[missing.as_os_str()])?;
    assert_eq!(code, 1);
    assert!(
        stderr.starts_with(&missing.display().to_string()),
        "{stderr}"
    );
    Ok(())
}

#[test]
fn count_denied_refuses_a_limit_that_cannot_count_denials() -> TestResult {
    let dir = scratch_dir("check_config_count_denied")?;
    let file = dir.join("shop.yaml");
    std::fs::write(
        &file,
        "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: sliding-log}\n",
    )?;
    let (code, _, stderr) = check_config(&[file.as_os_str()])?;
    assert_eq!(code, 0, "stderr: {stderr}");
    let (code, stdout, stderr) = check_config(&["--count-denied".as_ref(), file.as_os_str()])?;
    assert_eq!(code, 1, "stdout: {stdout}");
    assert!(
        stderr.contains("shop.yaml:3:5: shop.user: algorithm sliding-log cannot count denied"),
        "{stderr}"
    );
    std::fs::write(
        &file,
        "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: gcra}\n",
    )?;
    let (code, _, stderr) = check_config(&["--count-denied".as_ref(), file.as_os_str()])?;
    assert_eq!(code, 0, "stderr: {stderr}");
    Ok(())
}

/// A leaky queue means in a rule file what it means in a spec: without `nodelay` it shapes
/// (holds requests for a wait), which the service cannot do, so it is refused where it is
/// written instead of being read as `nodelay`; with `nodelay: true` it loads.
#[test]
fn a_leaky_queue_that_shapes_is_refused_at_its_line_and_column() -> TestResult {
    let dir = scratch_dir("check_config_shaping")?;
    let file = dir.join("queue.yaml");
    let rules = |extra: &str| {
        format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 10\n      algorithm: Leaky-Queue\n      burst: 5\n{extra}"
        )
    };
    for extra in ["", "      delay: 2\n"] {
        std::fs::write(&file, rules(extra))?;
        let (code, stdout, stderr) = check_config(&[file.as_os_str()])?;
        assert_eq!(code, 1, "{extra}: {stdout}");
        let expected = format!("{}:7:18: leaky-queue shapes", file.display());
        assert!(stderr.contains(&expected), "{extra}: {stderr}");
        assert!(stderr.contains("nodelay: true"), "{stderr}");
    }
    for extra in ["      nodelay: true\n", "      delay: 5\n"] {
        std::fs::write(&file, rules(extra))?;
        let (code, stdout, stderr) = check_config(&[file.as_os_str()])?;
        assert_eq!(code, 0, "{extra}: {stderr}");
        assert!(stdout.contains("algorithm=leaky-queue burst=5"), "{stdout}");
    }
    Ok(())
}

#[test]
fn a_proxy_rule_file_is_told_by_its_shape_and_checked_as_the_proxy_loads_it() -> TestResult {
    let dir = scratch_dir("check_config_proxy")?;
    let file = dir.join("proxy.yaml");
    std::fs::write(
        &file,
        "limits:\n  per_ip: { key: client_ip, spec: \"leaky-queue:rate=10/s,burst=20,nodelay\" }\nroutes:\n  - { exact: /login, limits: [per_ip] }\n  - { prefix: / }\n",
    )?;
    let (code, stdout, stderr) = check_config(&[file.as_os_str()])?;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("limit per_ip: leaky-queue:rate=10/s,burst=20,nodelay"),
        "{stdout}"
    );
    assert!(
        stdout.contains("route =/login (= /login): per_ip"),
        "{stdout}"
    );
    let (code, _, stderr) = check_config(&["--proxy".as_ref(), file.as_os_str()])?;
    assert_eq!(code, 0, "{stderr}");

    // Every problem at its file:line:column; `backend: redis` checked as Redis holds limits.
    std::fs::write(
        &file,
        "backend: redis\nlimits:\n  a: { key: nope, spec: \"gcra:rate=1/s\" }\n  b: { key: global, spec: \"smooth-warmup:rate=1,warmup=1s\" }\nroutes:\n  - { prefix: x, limits: [a, b] }\n",
    )?;
    let (code, stdout, stderr) = check_config(&[file.as_os_str()])?;
    assert_eq!(code, 1, "{stdout}");
    let shown = file.display().to_string();
    assert!(
        stderr.contains(&format!("{shown}:3:13: unknown key part")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{shown}:6:15: the path `x` must start with `/`")),
        "{stderr}"
    );

    // A service's rule file given `--proxy` is read as the proxy's, and refused.
    let service = dir.join("service.yaml");
    std::fs::write(&service, "domain: edge\ndescriptors: []\n")?;
    let (code, _, stderr) = check_config(&["--proxy".as_ref(), service.as_os_str()])?;
    assert_eq!(code, 1);
    assert!(stderr.contains("unknown key `domain`"), "{stderr}");
    Ok(())
}
