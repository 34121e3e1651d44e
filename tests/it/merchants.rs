//! Credentials bound to a merchant (the `merchant` mandate, ACP's `allowance.merchant_id`) on
//! a `paycred serve --dev` whose project is given `merchants: [{id: acme, hosts: [127.0.0.1]}]`
//! by a reload: the proxy sends a bound credential to its merchant's hosts only and refuses
//! any other host, or a merchant the project does not list, before the target sees anything;
//! ACP binds its tokens only where the project lists merchants, and refuses an allowance for
//! one it does not list; a browser session of a bound intent may ask only for the merchant's
//! hosts; the sandbox issuer approves the merchant's own authorizations only.

use crate::acp::{assert_no_card, request, Acp, CVC, NUMBER};
use crate::common::upstream::Upstream;
use crate::common::Reply;
use serde_json::{json, Value};

impl Acp {
    /// A `serve --dev` whose project lists the merchant `acme` at 127.0.0.1, by a reload of
    /// its configuration file.
    fn with_merchants() -> Acp {
        let acp = Acp::start();
        let file = acp.dir.path().join("dev/paycred.yaml");
        let text = std::fs::read_to_string(&file).unwrap();
        let ceiling = "    browser_checkout: {allowed_hosts: [localhost], max_ttl: 1h}\n";
        assert!(text.contains(ceiling), "{text}");
        let text = text.replace(
            ceiling,
            &format!("{ceiling}    merchants: [{{id: acme, hosts: [127.0.0.1]}}]\n"),
        );
        std::fs::write(&file, text).unwrap();
        crate::common::reload(&file);
        // In effect once an allowance for a merchant it does not list is refused.
        let mut tries = 0;
        let reloaded = crate::common::eventually(std::time::Duration::from_secs(10), || {
            tries += 1;
            let mut body = request(NUMBER);
            body["allowance"]["merchant_id"] = json!("nobody");
            acp.delegate(&format!("k-reload-{tries}"), &body).status == 422
        });
        assert!(reloaded, "the merchants were not reloaded");
        acp
    }

    /// A REST call of the project `dev` with the fixture's token.
    fn rest(&self, method: &str, path: &str, body: &Value) -> Reply {
        let url = format!("http://{}/projects/dev{path}", self.listen);
        Reply::of(
            ureq::request(method, &url)
                .set("Authorization", &format!("Bearer {}", self.token))
                .send_json(body.clone()),
        )
    }

    /// A POST through the proxy to `target` of a charge whose card is `id`'s virtual card.
    fn pay(&self, id: &str, target: &str) -> Reply {
        let field = |f: &str| {
            format!("{{{{ paymentMethod: {id} | type: 'virtual-card' | json: '$.{f}' }}}}")
        };
        let charge = json!({"number": field("number"), "cvc": field("cvc"), "amount": 1500});
        Reply::of(
            ureq::post(&format!("http://{}/projects/dev/proxy", self.listen))
                .set("Authorization", &format!("Bearer {}", self.token))
                .set("Svc-Target-URL", target)
                .set("Content-Type", "application/json")
                .send_string(&charge.to_string()),
        )
    }

    /// A vault token of an ACP allowance for `merchant_id`.
    fn vault_token(&self, key: &str, merchant_id: &str) -> String {
        let mut body = request(NUMBER);
        body["allowance"]["merchant_id"] = json!(merchant_id);
        let r = self.delegate(key, &body);
        assert_eq!(r.status, 201, "{}", r.text);
        r.json["id"].as_str().unwrap().to_string()
    }
}

/// A 403 `forbidden` naming the merchant and the host, never the card.
fn assert_refused(r: &Reply, merchant: &str, host: &str) {
    r.assert_error(403, "forbidden");
    let message = r.json["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(merchant) && message.contains(host),
        "{message}"
    );
    assert_no_card(r);
}

#[test]
fn an_acp_token_goes_to_its_merchants_hosts_only() {
    let acp = Acp::with_merchants();
    let target = Upstream::start();
    let vt = acp.vault_token("k-acme", "acme");
    let intent = acp.intent(&format!("pi_{}", &vt[3..]));
    assert_eq!(intent["mandates"]["merchant"], "acme", "{intent}");

    // Another host the project's proxy allows, but not acme's: refused, nothing sent, the
    // one use not spent.
    let port = target.url("").rsplit(':').next().unwrap().to_string();
    let elsewhere = format!("http://localhost:{port}/charges");
    let r = acp.pay(&vt, &elsewhere);
    assert_refused(&r, "acme", "localhost");
    assert_eq!(
        r.json["error"]["message"],
        "The credential is bound to merchant acme, and localhost is not one of its hosts in \
         this project's merchants."
    );
    assert!(target.requests().is_empty());

    // acme's host: sent.
    let r = acp.pay(&vt, &target.url("/charges"));
    assert!((200..300).contains(&r.status), "{}", r.text);
    assert_eq!(target.requests().len(), 1);

    // An allowance for a merchant the project does not list: ACP's 422, nothing stored.
    let mut body = request(NUMBER);
    body["allowance"]["merchant_id"] = json!("globex");
    let r = acp.delegate("k-globex", &body);
    assert_eq!(r.status, 422, "{}", r.text);
    assert_eq!(r.json["param"], "$.allowance.merchant_id", "{}", r.text);
    assert_eq!(
        r.json["message"],
        "allowance.merchant_id is not one of this project's merchants"
    );
    assert_no_card(&r);
}

/// Without `merchants`, ACP binds nothing: its token goes wherever the project's proxy
/// allows, and any `merchant_id` ACP allows is taken (echoed in the metadata).
#[test]
fn without_merchants_an_acp_token_is_not_bound() {
    let acp = Acp::start();
    let target = Upstream::start();
    let mut body = request(NUMBER);
    body["allowance"]["merchant_id"] = json!("Acme Corp (EU)");
    let r = acp.delegate("k-free", &body);
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(
        r.json["metadata"]["merchant_id"], "Acme Corp (EU)",
        "{}",
        r.text
    );
    let vt = r.json["id"].as_str().unwrap().to_string();
    let intent = acp.intent(&format!("pi_{}", &vt[3..]));
    assert!(intent["mandates"].get("merchant").is_none(), "{intent}");
    let port = target.url("").rsplit(':').next().unwrap().to_string();
    let r = acp.pay(&vt, &format!("http://localhost:{port}/charges"));
    assert!((200..300).contains(&r.status), "{}", r.text);
    assert_eq!(target.requests().len(), 1);
}

#[test]
fn a_rest_intent_bound_to_a_merchant() {
    let acp = Acp::with_merchants();
    let target = Upstream::start();
    let card = json!({"entityId": "user_1", "card": {"number": NUMBER, "expirationMonth": "11",
        "expirationYear": "2030", "cvc": CVC}});
    let r = acp.rest("POST", "/payment-methods", &card);
    assert_eq!(r.status, 201, "{}", r.text);
    let pm = r.json["id"].as_str().unwrap().to_string();
    let create = |mandates: Value| {
        acp.rest(
            "POST",
            "/purchase-intents",
            &json!({"credentialType": "virtual-card", "paymentMethodId": pm,
                "mandates": mandates}),
        )
    };

    // At most one merchant: a second is the usual 400 naming the field.
    let r = create(json!([{"type": "merchant", "value": "acme"},
        {"type": "merchant", "value": "globex"}]));
    r.assert_error(400, "invalidRequest");
    assert!(
        r.json["error"]["details"]["fields"]["mandates[1].value"].is_string(),
        "{}",
        r.text
    );
    let r = create(json!([{"type": "merchant", "value": "ac me"}]));
    r.assert_error(400, "invalidRequest");
    // A pan credential is the card itself (pan templates send it too): it cannot be bound.
    let r = acp.rest(
        "POST",
        "/purchase-intents",
        &json!({"credentialType": "pan", "paymentMethodId": pm,
            "mandates": [{"type": "merchant", "value": "acme"}]}),
    );
    r.assert_error(400, "invalidRequest");
    assert!(
        r.json["error"]["details"]["fields"]["credentialType"].is_string(),
        "{}",
        r.text
    );

    let r = create(json!([
        {"type": "maxAmount", "value": "50.00", "details": {"currency": "USD"}},
        {"type": "merchant", "value": "acme"}
    ]));
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["mandates"]["merchant"], "acme", "{}", r.text);
    let id = r.json["id"].as_str().unwrap().to_string();
    let card = r.json["card"].clone();
    assert_eq!(acp.intent(&id)["mandates"]["merchant"], "acme");

    // The sandbox issuer: acme's authorization only.
    let authorize = |merchant: Option<&str>| {
        let mut body = json!({"number": card["number"], "expirationMonth": card["expirationMonth"],
            "expirationYear": card["expirationYear"], "cvc": card["cvc"],
            "amount": "20.00", "currency": "USD"});
        if let Some(m) = merchant {
            body["merchantId"] = json!(m);
        }
        let r = acp.rest("POST", "/sandbox/authorizations", &body);
        assert_eq!(r.status, 200, "{}", r.text);
        r.json
    };
    let declined = json!({"approved": false, "declineReason": "merchantNotAllowed"});
    assert_eq!(authorize(Some("globex")), declined);
    assert_eq!(authorize(None), declined);
    assert_eq!(authorize(Some("acme")), json!({"approved": true}));
    let r = acp.rest(
        "POST",
        "/sandbox/authorizations",
        &json!({"number": card["number"], "expirationMonth": "11", "expirationYear": "2030",
            "cvc": "123", "amount": "1", "currency": "USD", "merchantId": "a b"}),
    );
    r.assert_error(400, "invalidRequest");
    assert!(r.json["error"]["details"]["fields"]["merchantId"].is_string());

    // A browser session may ask only for acme's hosts (the project's ceiling allows
    // localhost, acme has 127.0.0.1 only).
    let r = acp.rest(
        "POST",
        &format!("/purchase-intents/{id}/browser-sessions"),
        &json!({"allowedHosts": ["localhost"]}),
    );
    r.assert_error(400, "invalidRequest");
    let why = r.json["error"]["details"]["fields"]["allowedHosts"]
        .as_str()
        .unwrap();
    assert!(why.contains("acme") && why.contains("localhost"), "{why}");

    // The proxy, by the payment method (the newest active intent is the bound one).
    let port = target.url("").rsplit(':').next().unwrap().to_string();
    let r = acp.pay(&pm, &format!("http://localhost:{port}/charges"));
    assert_refused(&r, "acme", "localhost");
    assert!(target.requests().is_empty());
    let r = acp.pay(&pm, &target.url("/charges"));
    assert!((200..300).contains(&r.status), "{}", r.text);
    assert_eq!(target.requests().len(), 1);

    // Bound to a merchant the project does not list: refused toward any host.
    let r = create(json!([{"type": "merchant", "value": "globex"}]));
    assert_eq!(r.status, 201, "{}", r.text);
    let r = acp.pay(&pm, &target.url("/charges"));
    assert_refused(&r, "globex", "127.0.0.1");
    assert_eq!(
        r.json["error"]["message"],
        "The credential is bound to merchant globex, which this project's merchants do not \
         list: it cannot go to 127.0.0.1."
    );
    assert_eq!(target.requests().len(), 1);
}
