//! The MCP server on `/mcp` of a `paycred serve --dev`: the 2025-11-25 handshake and the
//! stateless 2026-07-28 requests, the tool list, every tool called, and every answer scanned
//! for the stored card's number and CVC and the intents' credentials (the `pan` intent's is
//! the card itself); refused without a private-role token of the project. `pay` on a TLS
//! listener, and refused where the project's response guard is off.

use crate::common::{dev_jwt, DevFixture, Reply};
use serde_json::{json, Value};

const NUMBER: &str = "4242424242424242";
const CVC: &str = "987";

struct Mcp {
    dev: DevFixture,
    /// Every answer's body, for the scan.
    seen: std::cell::RefCell<Vec<String>>,
}

impl std::ops::Deref for Mcp {
    type Target = DevFixture;
    fn deref(&self) -> &DevFixture {
        &self.dev
    }
}

impl Mcp {
    fn start() -> Mcp {
        Mcp {
            dev: DevFixture::start(),
            seen: Default::default(),
        }
    }

    fn post(&self, path: &str, headers: &[(&str, &str)], body: &Value) -> Reply {
        let mut req = ureq::post(&format!("http://{}{path}", self.listen))
            .set("Content-Type", "application/json")
            .set("Accept", "application/json, text/event-stream");
        for (name, value) in headers {
            req = req.set(name, value);
        }
        let reply = Reply::of(req.send_string(&body.to_string()));
        self.seen.borrow_mut().push(reply.text.clone());
        reply
    }

    /// `tools/list` in the stateless era with these routing headers and `_meta` revision
    /// (none: no `_meta`).
    fn listed_with(&self, version: &str, method: &str, meta: Option<&str>) -> Reply {
        let auth = format!("Bearer {}", self.token);
        let mut body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
        if let Some(meta) = meta {
            body["params"] = json!({"_meta": {
                "io.modelcontextprotocol/protocolVersion": meta,
                "io.modelcontextprotocol/clientCapabilities": {}}});
        }
        let headers = [
            ("Authorization", auth.as_str()),
            ("MCP-Protocol-Version", version),
            ("Mcp-Method", method),
        ];
        self.post("/mcp", &headers, &body)
    }

    /// A request of the handshake era (2025-11-25).
    fn legacy(&self, method: &str, params: Value) -> Reply {
        let auth = format!("Bearer {}", self.token);
        self.post(
            "/mcp",
            &[
                ("Authorization", &auth),
                ("MCP-Protocol-Version", "2025-11-25"),
            ],
            &json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
        )
    }

    /// A stateless request of 2026-07-28 with its `_meta` and routing headers.
    fn stateless(&self, method: &str, mut params: Value) -> Reply {
        let auth = format!("Bearer {}", self.token);
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        let name = params["name"].as_str().unwrap_or_default().to_string();
        let mut headers = vec![
            ("Authorization", auth.as_str()),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", method),
        ];
        if !name.is_empty() {
            headers.push(("Mcp-Name", &name));
        }
        self.post(
            "/mcp",
            &headers,
            &json!({"jsonrpc": "2.0", "id": "r1", "method": method, "params": params}),
        )
    }

    /// Calls a tool (alternating the eras); its result.
    fn tool(&self, name: &str, arguments: Value) -> Value {
        let params = json!({"name": name, "arguments": arguments});
        let odd = self.seen.borrow().len() % 2 == 1;
        let answer = match odd {
            true => self.stateless("tools/call", params),
            false => self.legacy("tools/call", params),
        };
        assert_eq!(answer.status, 200, "{}", answer.json);
        let result = answer.json["result"].clone();
        assert!(result["content"][0]["text"].is_string(), "{result}");
        result
    }

    /// A tool's error envelope (its text), after `isError`.
    fn error(&self, name: &str, arguments: Value) -> Value {
        let result = self.tool(name, arguments);
        assert_eq!(result["isError"], true, "{name}: {result}");
        assert_eq!(result.get("structuredContent"), None, "{result}");
        serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap()
    }

    /// A tool's successful view, which its text also holds.
    fn ok(&self, name: &str, arguments: Value) -> Value {
        let result = self.tool(name, arguments);
        assert_eq!(result["isError"], false, "{name}: {result}");
        let text = result["content"][0]["text"].as_str().unwrap();
        let view = result["structuredContent"].clone();
        assert_eq!(serde_json::from_str::<Value>(text).unwrap(), view);
        view
    }

    /// A REST call with the token.
    fn rest(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let req = ureq::request(
            method,
            &format!("http://{}/projects/dev{path}", self.listen),
        )
        .set("Authorization", &format!("Bearer {}", self.token));
        let resp = match body {
            Some(b) => req.send_json(b),
            None => req.call(),
        };
        resp.unwrap().into_json().unwrap()
    }
}

#[test]
fn both_revisions_and_every_tool_answer_without_a_card_value() {
    let mcp = Mcp::start();
    // The handshake: the client's revision, or the newest one for an unknown one; no session.
    for (asked, answered) in [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2023-01-01", "2025-11-25"),
    ] {
        let init = mcp.legacy(
            "initialize",
            json!({"protocolVersion": asked, "capabilities": {},
                "clientInfo": {"name": "it", "version": "1"}}),
        );
        assert_eq!(init.status, 200);
        assert_eq!(
            init.json["result"]["protocolVersion"], answered,
            "{}",
            init.json
        );
        assert!(init.json["result"]["capabilities"]["tools"].is_object());
        assert_eq!(init.header("Mcp-Session-Id"), None);
    }
    let auth = format!("Bearer {}", mcp.token);
    let initialized = mcp.post(
        "/mcp",
        &[("Authorization", &auth)],
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(initialized.status, 202);
    // 2026-07-28: discover, and what a stateless request must carry.
    let discover = mcp.stateless("server/discover", json!({}));
    assert_eq!(discover.status, 200, "{}", discover.json);
    let found = &discover.json["result"];
    assert_eq!(found["supportedVersions"], json!(["2026-07-28"]));
    assert_eq!(found["resultType"], "complete");
    assert!(found["capabilities"]["tools"].is_object());
    let bare = mcp.listed_with("2026-07-28", "tools/list", None);
    assert_eq!(
        (bare.status, &bare.json["error"]["code"]),
        (400, &json!(-32602))
    );
    let mismatched = mcp.listed_with("2026-07-28", "ping", Some("2026-07-28"));
    assert_eq!(
        mismatched.json["error"]["code"], -32020,
        "{}",
        mismatched.text
    );
    let future = mcp.listed_with("2099-01-01", "tools/list", Some("2099-01-01"));
    assert_eq!(future.status, 400);
    assert_eq!(future.json["error"]["code"], -32022);
    assert_eq!(
        future.json["error"]["data"]["supported"],
        json!(["2026-07-28"])
    );
    let unknown = mcp.stateless("resources/list", json!({}));
    assert_eq!(
        (unknown.status, &unknown.json["error"]["code"]),
        (404, &json!(-32601))
    );

    // The tool list, the same in both eras.
    let names = [
        "list_payment_methods",
        "create_purchase_intent",
        "get_purchase_intent",
        "cancel_purchase_intent",
        "pay",
        "create_browser_session",
    ];
    for list in [
        mcp.legacy("tools/list", json!({})),
        mcp.stateless("tools/list", json!({})),
    ] {
        let tools = list.json["result"]["tools"].as_array().unwrap().clone();
        let listed: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(listed, names);
        for t in &tools {
            assert_eq!(t["inputSchema"]["type"], "object", "{t}");
            assert_eq!(t["outputSchema"]["type"], "object", "{t}");
        }
    }

    // The card, stored over REST.
    let pm = mcp.rest(
        "POST",
        "/payment-methods",
        Some(json!({"entityId": "user_1", "card": {"number": NUMBER,
            "expirationMonth": "12", "expirationYear": "2030", "cvc": CVC}})),
    );
    let pm_id = pm["id"].as_str().unwrap().to_string();
    let listed = mcp.ok("list_payment_methods", json!({}));
    assert_eq!(listed["paymentMethods"][0]["last4"], "4242", "{listed}");
    assert_eq!(listed["paymentMethods"][0]["brand"], "visa", "{listed}");
    assert_eq!(listed["paymentMethods"][0]["expirationYear"], "2030");

    let mandates = json!([{"type": "maxAmount", "value": "50.00", "details": {"currency": "840"}}]);
    let virtual_card = mcp.ok(
        "create_purchase_intent",
        json!({"paymentMethodId": pm_id, "credentialType": "virtual-card", "mandates": mandates}),
    );
    assert_eq!(virtual_card["status"], "active", "{virtual_card}");
    assert_eq!(virtual_card["nextAction"]["type"], "pay");
    let vc_id = virtual_card["id"].as_str().unwrap().to_string();
    // What the REST API shows of its credential (the values the scan looks for).
    let vc_rest = mcp.rest("GET", &format!("/purchase-intents/{vc_id}"), None);
    let vc_number = vc_rest["card"]["number"].as_str().unwrap().to_string();
    let vc_cvc = vc_rest["card"]["cvc"].as_str().unwrap().to_string();
    assert_eq!(virtual_card["last4"], vc_number[vc_number.len() - 4..]);

    let pan = mcp.ok(
        "create_purchase_intent",
        json!({"paymentMethodId": pm_id, "credentialType": "pan", "mandates": mandates}),
    );
    assert_eq!(pan["status"], "active", "{pan}");
    assert_eq!(pan["last4"], "4242");
    let pan_id = pan["id"].as_str().unwrap().to_string();
    let got = mcp.ok("get_purchase_intent", json!({"id": pan_id}));
    assert_eq!((&got["id"], &got["last4"]), (&pan["id"], &json!("4242")));

    // pay: the sandbox charged through the proxy, the card named by templates.
    let field = |f: &str| {
        format!("{{{{ paymentMethod: {pm_id} | type: 'virtual-card' | json: '$.{f}' }}}}")
    };
    let base = format!("http://{}/projects/dev", mcp.listen);
    let paid = mcp.ok(
        "pay",
        json!({"method": "POST", "url": format!("{base}/sandbox/authorizations"),
            "headers": {"Authorization": auth},
            "body": {"number": field("number"), "cvc": field("cvc"),
                "expirationMonth": field("expirationMonth"),
                "expirationYear": field("expirationYear"),
                "amount": "12.50", "currency": "USD"}}),
    );
    assert_eq!(paid["status"], 200, "{paid}");
    assert_eq!(paid["body"]["approved"], true, "{paid}");
    // A target that echoes what it was sent: the card values come back masked.
    let echo = echo_target();
    let pan_field =
        |f: &str| format!("{{{{ paymentMethod: {pm_id} | type: 'pan' | json: '$.{f}' }}}}");
    let echoed = mcp.ok(
        "pay",
        json!({"method": "POST", "url": format!("http://{echo}/charge"),
            "body": {"card": pan_field("number"), "cvc": pan_field("cvc"), "note": "4111 1111 1111 1111"}}),
    );
    assert_eq!(echoed["status"], 200, "{echoed}");
    assert_eq!(echoed["body"]["card"], "424242******4242", "{echoed}");
    assert_eq!(echoed["body"]["cvc"], "***", "{echoed}");
    // Any card number, not only the one sent, is masked before it reaches the model.
    assert_eq!(echoed["body"]["note"], "4111 11** **** 1111", "{echoed}");
    // A bad template: the proxy's own error, as a tool error.
    let bad = mcp.error(
        "pay",
        json!({"method": "POST", "url": format!("{base}/sandbox/authorizations"),
            "body": {"number": "{{ $.number }}"}}),
    );
    assert_eq!(bad["error"]["type"], "invalidTemplate", "{bad}");

    let session = mcp.ok(
        "create_browser_session",
        json!({"purchaseIntentId": pan_id, "allowedHosts": ["localhost"], "ttl": 600}),
    );
    assert_eq!(session["status"], "active", "{session}");
    assert!(session["proxy"]["password"].is_string(), "{session}");
    let stand_in = session["card"]["number"].as_str().unwrap();
    assert_eq!(stand_in.len(), NUMBER.len());
    assert_ne!(stand_in, NUMBER);

    let canceled = mcp.ok("cancel_purchase_intent", json!({"id": vc_id}));
    assert_eq!(canceled["status"], "canceled", "{canceled}");
    assert_eq!(canceled["last4"], Value::Null);
    assert_eq!(canceled["nextAction"], Value::Null);
    let again = mcp.ok("cancel_purchase_intent", json!({"id": vc_id}));
    assert_eq!(again["status"], "canceled");

    // Failures: the API's error in a tool error.
    let missing = mcp.error("get_purchase_intent", json!({"id": "pi_nope"}));
    assert_eq!(missing["error"]["type"], "notFound");
    let invalid = mcp.error(
        "create_purchase_intent",
        json!({"paymentMethodId": pm_id, "credentialType": "paper", "mandates": []}),
    );
    assert!(
        invalid["error"]["details"]["fields"]["credentialType"].is_string(),
        "{invalid}"
    );
    let no_tool = mcp.legacy("tools/call", json!({"name": "steal_card", "arguments": {}}));
    assert_eq!(no_tool.json["error"]["code"], -32602);

    // Nor does the server's log.
    let log = std::fs::read_to_string(mcp.dir.path().join("dev.log")).unwrap();
    assert!(!log.contains(&vc_number) && !log.contains(&format!("\"{vc_cvc}\"")));
    // The dev banner's example card is 4242…: only the lines of this test's requests.
    for line in log.lines().filter(|l| l.contains("route=")) {
        assert!(!line.contains(NUMBER), "{line}");
    }
    // The scan: no answer holds the card's number or CVC, nor the virtual card's.
    let seen = mcp.seen.borrow();
    assert!(seen.len() > 20);
    for body in seen.iter() {
        for secret in [
            NUMBER,
            &vc_number,
            "4111111111111111",
            "4111 1111 1111 1111",
        ] {
            assert!(!body.contains(secret), "{body}");
        }
        let json: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        let mut strings = Vec::new();
        collect_strings(&json, &mut strings);
        // Tool texts are JSON too.
        for text in strings.clone() {
            if let Ok(inner) = serde_json::from_str::<Value>(&text) {
                collect_strings(&inner, &mut strings);
            }
        }
        for s in &strings {
            assert!(s != CVC && *s != vc_cvc, "a CVC in {body}");
        }
    }
}

/// A target on 127.0.0.1 that answers each request's body back as JSON; its address.
fn echo_target() -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming().take(4) {
            let Ok(conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                    break;
                }
                if let Some((name, value)) = line.split_once(':') {
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.trim().parse().unwrap_or(0);
                    }
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let mut conn = conn;
            let _ = conn.write_all(head.as_bytes());
            let _ = conn.write_all(&body);
        }
    });
    addr
}

fn collect_strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| collect_strings(x, out)),
        Value::Object(o) => o.values().for_each(|x| collect_strings(x, out)),
        _ => {}
    }
}

#[test]
fn refused_without_a_private_token_of_the_project() {
    let mcp = Mcp::start();
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let no_token = mcp.post("/mcp", &[], &list);
    assert_eq!(no_token.status, 401);
    assert!(
        no_token
            .header("WWW-Authenticate")
            .is_some_and(|v| v.starts_with("Bearer")),
        "{:?}",
        no_token.headers
    );
    assert!(no_token.json.get("result").is_none(), "{}", no_token.json);
    let forged = mcp.post("/mcp", &[("Authorization", "Bearer not.a.jwt")], &list);
    assert_eq!(forged.status, 401);
    assert!(forged.header("WWW-Authenticate").is_some());
    let public = format!("Bearer {}", dev_jwt(mcp.dir.path(), "user_1", "public"));
    let by_public = mcp.post("/mcp", &[("Authorization", &public)], &list);
    assert_eq!(by_public.status, 403, "{}", by_public.json);
    let auth = format!("Bearer {}", mcp.token);
    let elsewhere = mcp.post("/projects/other/mcp", &[("Authorization", &auth)], &list);
    assert_eq!(elsewhere.status, 403, "{}", elsewhere.json);
    let page = mcp.post(
        "/mcp",
        &[
            ("Authorization", &auth),
            ("Origin", "http://rebound.example"),
        ],
        &list,
    );
    assert_eq!(page.status, 403, "{}", page.text);
    let path_form = mcp.post("/projects/dev/mcp", &[("Authorization", &auth)], &list);
    assert_eq!(path_form.status, 200);
    assert_eq!(
        path_form.json["result"]["tools"].as_array().map(Vec::len),
        Some(6)
    );
    // No stream to open, no session to end.
    for method in ["GET", "DELETE"] {
        let resp = ureq::request(method, &format!("http://{}/mcp", mcp.listen))
            .set("Authorization", &auth)
            .call();
        let Err(ureq::Error::Status(405, r)) = resp else {
            panic!("{method} /mcp is not 405")
        };
        assert_eq!(r.header("Allow"), Some("POST"));
    }
}

/// On a TLS listener `pay` reaches the proxy route over TLS too (loopback, the listener's own
/// certificate); a project whose response guard is off may not `pay`.
#[test]
fn pay_over_a_tls_listener_and_not_without_the_response_guard() {
    use crate::common::{card_body, ed_token, Options, Server, CVC};
    let project = |id: &str, guard: &str| {
        format!(
            "  - id: {id}\n    jwt:\n      keys: [{{kid: k-ed, public_key_file: KEYS_DIR/ed.pem}}]\n    \
             pan: enabled\n    proxy:\n      allowed_hosts: [127.0.0.1]\n      allow_http: true\n      \
             allow_private_networks: true\n{guard}"
        )
    };
    let server = Server::start_with(Options {
        tls: true,
        extra_project_yaml: [
            project("proj_mcp", ""),
            project("proj_open", "      response_guard: 'off'\n"),
        ]
        .concat(),
        ..Options::default()
    });
    let echo = echo_target();
    let ca = server.ca.clone().unwrap();
    // The harness's client speaks no TLS: curl does, trusting the test CA.
    let post = |path: &str, token: &str, body: &Value| -> Value {
        let out = std::process::Command::new("curl")
            .args(["-s", "--max-time", "30", "--cacert"])
            .arg(&ca)
            .args(["-H", &format!("Authorization: Bearer {token}")])
            .args([
                "-H",
                "Content-Type: application/json",
                "-d",
                &body.to_string(),
            ])
            .arg(format!("{}{path}", server.base))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(!text.contains(NUMBER), "{text}");
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("{text}"))
    };
    for (id, refused) in [("proj_mcp", false), ("proj_open", true)] {
        let token = ed_token(id, "user_1", "private");
        let pm = post(
            &format!("/projects/{id}/payment-methods"),
            &token,
            &card_body("user_1", NUMBER, CVC),
        );
        let pm = pm["id"].as_str().unwrap().to_string();
        let call = |name: &str, arguments: Value| {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": name, "arguments": arguments}});
            post("/mcp", &token, &body)["result"].clone()
        };
        let intent = call(
            "create_purchase_intent",
            json!({"paymentMethodId": pm, "credentialType": "pan", "mandates": [
                {"type": "maxAmount", "value": "50.00", "details": {"currency": "840"}}]}),
        );
        assert_eq!(intent["structuredContent"]["status"], "active", "{intent}");
        let number = format!("{{{{ paymentMethod: {pm} | type: 'pan' | json: '$.number' }}}}");
        let paid = call(
            "pay",
            json!({"method": "POST", "url": format!("http://{echo}/charge"),
                "body": {"card": number}}),
        );
        if refused {
            assert_eq!(paid["isError"], true, "{paid}");
            assert!(paid["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("forbidden"));
        } else {
            assert_eq!(paid["isError"], false, "{paid}");
            assert_eq!(
                paid["structuredContent"]["body"]["card"], "424242******4242",
                "{paid}"
            );
        }
    }
}
