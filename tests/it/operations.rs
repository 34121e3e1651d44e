//! Running it as an operator does: `/metrics` kept off the public listener unless configured,
//! and the configuration reloaded (`paycred reload`, SIGHUP) under load without a failed
//! request, a broken file refused with the running configuration kept.

use crate::common::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn get(url: &str, token: Option<&str>) -> (u16, String) {
    let mut req = ureq::get(url).timeout(Duration::from_secs(10));
    if let Some(t) = token {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    match req.call() {
        Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(s, r)) => (s, r.into_string().unwrap_or_default()),
        Err(e) => (0, e.to_string()),
    }
}

#[test]
fn metrics_are_served_only_where_the_config_says() {
    // Nothing configured: the public /metrics is an unknown route.
    let server = Server::start_with(Options {
        metrics_yaml: "{}".into(),
        ..Options::default()
    });
    server.metrics().assert_error(404, "notFound");
    drop(server);

    // A bearer token: the right one, and nothing else, reads the page.
    let server = Server::start();
    let url = format!("{}/metrics", server.base);
    assert_eq!(get(&url, None).0, 401);
    assert_eq!(
        get(&url, Some("test-metrics-token-0123456789abcdeX")).0,
        401
    );
    assert_eq!(get(&url, Some(&server.token("user_1", "private"))).0, 401);
    let (status, page) = get(&url, Some(METRICS_TOKEN));
    assert_eq!(status, 200);
    assert!(page.contains("paycred_requests_total"), "{page}");
    drop(server);

    // A listener of its own: the page there, and the public one is an unknown route.
    let port = free_port();
    let server = Server::start_with(Options {
        metrics_yaml: format!("{{listen: 127.0.0.1:{port}}}"),
        ..Options::default()
    });
    server.metrics().assert_error(404, "notFound");
    let (status, page) = get(&format!("http://127.0.0.1:{port}/metrics"), None);
    assert_eq!(status, 200);
    assert!(page.contains("paycred_requests_total"), "{page}");
    // The public listener's refusal is counted there once its request is logged.
    assert!(eventually(Duration::from_secs(10), || get(
        &format!("http://127.0.0.1:{port}/metrics"),
        None
    )
    .1
    .contains(
        "paycred_requests_total{route=\"metrics\",status=\"404\"} 1"
    )));
    assert_eq!(get(&format!("http://127.0.0.1:{port}/health"), None).0, 404);
    let post = ureq::post(&format!("http://127.0.0.1:{port}/metrics")).call();
    assert!(matches!(post, Err(ureq::Error::Status(405, _))));
}

#[test]
fn a_short_metrics_token_or_a_metrics_listener_on_the_public_address_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("t");
    std::fs::write(&token, "short").unwrap();
    write_private(&dir.path().join("k"), &"00".repeat(32));
    for (metrics, says) in [
        (
            format!("{{bearer_token_file: {}}}", token.display()),
            "metrics.bearer_token_file: must hold one token of at least 32",
        ),
        (
            "{listen: 127.0.0.1:8080}".to_string(),
            "metrics.listen: must differ from `listen`",
        ),
    ] {
        let config = dir.path().join("c.yaml");
        std::fs::write(
            &config,
            format!("listen: 127.0.0.1:8080\nmaster_key_file: k\nmetrics: {metrics}\n"),
        )
        .unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_paycred"))
            .args(["check", "-c"])
            .arg(&config)
            .env_remove("PAYCRED_MASTER_KEY")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && said.contains(says), "{said}");
    }
}

/// `paycred reload` of the server's configuration file.
fn reload(server: &Server) {
    crate::common::reload(&server.config_path);
}

#[test]
fn a_reload_adds_a_key_and_a_project_under_load_and_a_broken_file_changes_nothing() {
    let mut server = Server::start();
    let d = server.dir.path().display().to_string();
    let list = format!("/projects/{PROJECT}/payment-methods");
    let new_kid = token_for(
        &KEYS.rsa.private_pem,
        "k-new",
        PROJECT,
        "user_1",
        "private",
        300,
    );
    let new_project = token_for(&KEYS.ec.private_pem, "k-n", "proj_new", "u", "private", 300);
    let new_project_list = "/projects/proj_new/payment-methods";
    server
        .call("GET", &list, Some(&new_kid), None)
        .assert_error(401, "unauthorized");
    assert_eq!(
        server
            .call("GET", new_project_list, Some(&new_project), None)
            .status,
        401
    );

    let stop = AtomicBool::new(false);
    let (sent, failed) = (AtomicU64::new(0), AtomicU64::new(0));
    let token = server.token("user_1", "private");
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let deadline = Instant::now() + Duration::from_secs(60);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    let r = server.call("GET", &list, Some(&token), None);
                    sent.fetch_add(1, Ordering::Relaxed);
                    if r.status != 200 {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        // Under load: a kid for the project and a new project.
        let bound = Duration::from_secs(30);
        assert!(eventually(bound, || sent.load(Ordering::Relaxed) >= 300));
        let text = std::fs::read_to_string(&server.config_path).unwrap();
        let ed_key = format!("- {{kid: k-ed, public_key_file: {d}/ed.pem}}\n");
        let indent = text
            .lines()
            .find(|l| l.ends_with(ed_key.trim_end()))
            .unwrap();
        let indent = &indent[..indent.len() - ed_key.trim_end().len()];
        let text = text.replacen(
            &ed_key,
            &format!("{ed_key}{indent}- {{kid: k-new, public_key_file: {d}/rsa.pem}}\n"),
            1,
        ) + &format!(
            "  - id: proj_new\n    jwt:\n      keys: [{{kid: k-n, public_key_file: {d}/ec.pem}}]\n"
        );
        std::fs::write(&server.config_path, &text).unwrap();
        reload(&server);
        let took = eventually(bound, || {
            server.call("GET", &list, Some(&new_kid), None).status == 200
                && server
                    .call("GET", new_project_list, Some(&new_project), None)
                    .status
                    == 200
        });
        assert!(took, "the reloaded keys were not taken");
        assert!(eventually(bound, || sent.load(Ordering::Relaxed) >= 1_000));
        stop.store(true, Ordering::Relaxed);
    });
    let (sent, failed) = (sent.into_inner(), failed.into_inner());
    println!("reload under load: {sent} requests, {failed} failed");
    assert!(sent >= 1_000);
    assert_eq!(failed, 0);

    // A file that does not parse, then one that does not check: both refused, the running
    // configuration stays (the new key still works, nothing else changed).
    let good = std::fs::read_to_string(&server.config_path).unwrap();
    for broken in [
        good.replace("projects:", "projects: ["),
        good.replace("pan: enabled", "pan: sometimes"),
    ] {
        std::fs::write(&server.config_path, broken).unwrap();
        // `paycred reload` checks the file first and does not signal; SIGHUP itself then.
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_paycred"))
            .args(["reload", "-c"])
            .arg(&server.config_path)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && said.contains("not signalled"),
            "{said}"
        );
        server.signal("HUP");
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(server.call("GET", &list, Some(&new_kid), None).status, 200);
        assert_eq!(
            server
                .call("GET", new_project_list, Some(&new_project), None)
                .status,
            200
        );
    }
    // A setting only a restart changes is named, and keeps its running value.
    let port = free_port();
    std::fs::write(
        &server.config_path,
        good.replace(
            &server.base.replace("http://", ""),
            &format!("127.0.0.1:{port}"),
        ),
    )
    .unwrap();
    reload(&server);
    assert!(eventually(Duration::from_secs(10), || {
        std::fs::read_to_string(server.log_path())
            .unwrap_or_default()
            .contains("needs_restart=[\"listen\"]")
    }));
    assert_eq!(server.call("GET", &list, Some(&new_kid), None).status, 200);
    let log = server.log();
    assert_eq!(
        log.matches("configuration not reloaded, the running one stays")
            .count(),
        2,
        "{log}"
    );
    assert!(log.contains("pan"), "the refusal names the key: {log}");
}

#[test]
fn the_data_dir_variable_replaces_the_files_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    write_private(&dir.path().join("k"), &"00".repeat(32));
    let config = dir.path().join("c.yaml");
    std::fs::write(
        &config,
        format!("listen: 127.0.0.1:{port}\ndata_dir: from-file\nmaster_key_file: k\n"),
    )
    .unwrap();
    let volume = dir.path().join("volume");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_paycred"))
        .args(["serve", "-c"])
        .arg(&config)
        .env("PAYCRED_DATA_DIR", &volume)
        .env_remove("PAYCRED_MASTER_KEY")
        .env_remove("PAYCRED_LISTEN")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let healthy = eventually(Duration::from_secs(30), || {
        get(&format!("http://127.0.0.1:{port}/health"), None).0 == 200
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(healthy);
    assert!(volume.join("paycred.pid").exists());
    assert!(!dir.path().join("from-file").exists());
}

/// What one request made while a server is upgraded came to.
enum Sent {
    Answered,
    /// The connection was closed with its request unread: the old server stopping.
    ClosedUnread,
    Failed(String),
}

#[test]
fn an_upgrade_takes_the_sockets_over_and_no_connection_is_refused() {
    let mut server = Server::start();
    let token = server.token("user_1", "private");
    let pm = server.add_card(&token, "user_1", VISA);
    let url = format!("{}/projects/{PROJECT}/payment-methods/{pm}", server.base);
    upgrade_under_requests(&mut server, &|| {
        // A new connection each time: a refused one would show.
        let r = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(60))
            .build()
            .get(&url)
            .set("Authorization", &format!("Bearer {token}"))
            .call();
        match r {
            Ok(r) if r.status() == 200 => Sent::Answered,
            // pingora closes a connection whose request it has not read yet when it stops
            // (nothing was processed; a client retries it), seen as an end of stream or,
            // with the request unread, a reset.
            Err(ureq::Error::Transport(t))
                if ["Unexpected EOF", "ConnectionReset"]
                    .iter()
                    .any(|k| format!("{t:?}").contains(k)) =>
            {
                Sent::ClosedUnread
            }
            other => Sent::Failed(format!("{other:?}")),
        }
    });
}

#[test]
fn an_upgrade_takes_the_tls_socket_over_and_no_connection_is_refused() {
    let mut server = Server::start_with(Options {
        tls: true,
        ..Options::default()
    });
    let (port, ca) = (server.port(), server.ca.clone().unwrap());
    upgrade_under_requests(&mut server, &|| {
        let request = b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
        match tls::h1_exchange(port, &ca, tls::H1, request) {
            Some((_, answer)) if tls::h1_status(&answer) == 200 => Sent::Answered,
            // Closed with the request unread as the old server stops, before or after the
            // handshake. A refused connection shows here too: more than one per client
            // fails the test.
            Some((_, answer)) if answer.is_empty() => Sent::ClosedUnread,
            None => Sent::ClosedUnread,
            Some((_, answer)) => Sent::Failed(answer.lines().next().unwrap_or("").to_string()),
        }
    });
}

/// Upgrades `server` (`serve --upgrade`, then SIGQUIT to the old one) while two clients
/// send `request` on new connections: every request is answered but at most one a client,
/// closed unread as the old server stops, and the new server serves on with the old one's
/// data.
fn upgrade_under_requests(server: &mut Server, request: &(dyn Fn() -> Sent + Sync)) {
    let log = std::fs::File::create(server.dir.path().join("upgrade.log")).unwrap();
    let mut next = std::process::Command::new(env!("CARGO_BIN_EXE_paycred"))
        .args(["serve", "--upgrade", "-c"])
        .arg(&server.config_path)
        .env("RUST_LOG", "info")
        .env_remove("PAYCRED_MASTER_KEY")
        .env_remove("PAYCRED_LISTEN")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let stop = AtomicBool::new(false);
    let (sent, failed, dropped) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let handed_over = std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let deadline = Instant::now() + Duration::from_secs(90);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    let r = request();
                    sent.fetch_add(1, Ordering::Relaxed);
                    match r {
                        Sent::Answered => {}
                        Sent::ClosedUnread => {
                            dropped.fetch_add(1, Ordering::Relaxed);
                        }
                        Sent::Failed(why) => {
                            if failed.fetch_add(1, Ordering::Relaxed) < 3 {
                                println!("upgrade: a request failed: {why}");
                            }
                        }
                    }
                }
            });
        }
        // The new server listens for the sockets on the upgrade socket: then the hand-over.
        let upgrade_sock = server.dir.path().join("data/paycred-upgrade.sock");
        assert!(eventually(Duration::from_secs(30), || upgrade_sock.exists()));
        server.signal("QUIT");
        let handed_over = eventually(Duration::from_secs(60), || server.exited());
        // The new server answers alone now, with the data of the old one.
        let before = sent.load(Ordering::Relaxed);
        eventually(Duration::from_secs(30), || {
            sent.load(Ordering::Relaxed) >= before + 50
        });
        stop.store(true, Ordering::Relaxed);
        handed_over
    });
    let _ = std::process::Command::new("kill")
        .arg(next.id().to_string())
        .status();
    let _ = next.wait();
    let (sent, failed, dropped) = (sent.into_inner(), failed.into_inner(), dropped.into_inner());
    println!("upgrade: {sent} requests, {failed} failed, {dropped} closed unread");
    assert!(handed_over, "the old server did not stop");
    assert!(sent >= 100, "{sent}");
    assert_eq!(failed, 0);
    assert!(dropped <= 2, "{dropped} connections closed unread");
    let log = std::fs::read_to_string(server.dir.path().join("upgrade.log")).unwrap();
    assert!(
        log.contains("upgrade: waiting for the running server to release"),
        "{log}"
    );
}
