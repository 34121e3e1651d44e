//! `GET /openapi.json`: the API as built, in OpenAPI 3.0. Written by hand here (one place,
//! next to nothing else) and checked by CI: `scripts/schemathesis` runs schemathesis against
//! a live server with this document (no 5xx, responses match the schemas, nothing accepted
//! without a token).
//!
//! Every path exists in both forms of DESIGN.md §2 (`/projects/{projectId}/…` and
//! `/tenants/{projectId}/…`, plus the singular `purchase-intent`).

use once_cell::sync::Lazy;
use serde_json::{json, Map, Value};

/// The document, built once.
pub static DOCUMENT: Lazy<String> = Lazy::new(|| document().to_string());

fn error_ref() -> Value {
    json!({"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
}

/// The error answers every authenticated operation may give.
fn errors(extra: &[u16]) -> Map<String, Value> {
    let mut m = Map::new();
    let mut codes = vec![400, 401, 403, 404, 405, 413, 415, 429, 500, 503];
    codes.extend_from_slice(extra);
    codes.sort_unstable();
    codes.dedup();
    for code in codes {
        let mut e = error_ref();
        if let Some(obj) = e.as_object_mut() {
            obj.insert("description".into(), json!(description(code)));
            if code == 429 {
                obj.insert(
                    "headers".into(),
                    json!({"Retry-After": {"description": "Seconds until a request is allowed again.", "schema": {"type": "string"}}}),
                );
            }
            if code == 405 {
                obj.insert(
                    "headers".into(),
                    json!({"Allow": {"description": "The methods this route answers.", "schema": {"type": "string"}}}),
                );
            }
        }
        m.insert(code.to_string(), e);
    }
    m
}

fn description(code: u16) -> &'static str {
    match code {
        400 => "invalidRequest (details.fields names each bad field) or invalidTemplate",
        401 => "unauthorized: token missing or invalid",
        403 => "forbidden: another project's token, entityId is not the token's sub, or the public role",
        404 => "notFound: no such id for this project and entity",
        405 => "methodNotAllowed",
        409 => "conflict: Idempotency-Key reused with another request, or still in flight",
        413 => "payloadTooLarge",
        415 => "unsupportedMediaType",
        429 => "rateLimited",
        500 => "internalError",
        502 => "badGateway: the target could not be reached",
        503 => "serviceUnavailable: storage temporarily unavailable",
        504 => "gatewayTimeout: the target did not answer in time",
        _ => "error",
    }
}

fn json_body(schema: &str) -> Value {
    json!({"required": true, "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}})
}

fn ok(description: &str, schema: Value) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": schema}}})
}

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn idempotency_header() -> Value {
    json!({"name": "Idempotency-Key", "in": "header", "required": false,
           "description": "Same key and request (and token role) within 24 h: the first response again (Idempotent-Replayed: true); a purchase intent as it is then, its credential only while active. Another request with the key: 409.",
           "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"}})
}

fn path_param(name: &str) -> Value {
    json!({"name": name, "in": "path", "required": true,
           "schema": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,128}$"}})
}

fn op(
    summary: &str,
    id: &str,
    params: Vec<Value>,
    body: Option<Value>,
    success: (u16, Value),
    extra_errors: &[u16],
) -> Value {
    let mut responses = errors(extra_errors);
    responses.insert(success.0.to_string(), success.1);
    let mut o = json!({
        "summary": summary,
        "operationId": id,
        "parameters": params,
        "responses": responses,
    });
    if let (Some(b), Some(obj)) = (body, o.as_object_mut()) {
        obj.insert("requestBody".into(), b);
    }
    o
}

fn proxy_responses() -> Map<String, Value> {
    let mut r = errors(&[502, 504]);
    r.insert(
        "default".into(),
        json!({"description": "The target's answer, passed through"}),
    );
    r
}

fn paths() -> Map<String, Value> {
    let mut paths = Map::new();
    let forms: [(&str, &str, &str); 3] = [
        ("/projects/{projectId}", "purchase-intents", ""),
        ("/tenants/{projectId}", "purchase-intents", "Tenant"),
        ("/tenants/{projectId}", "purchase-intent", "TenantSingular"),
    ];
    for (prefix, pi, suffix) in forms {
        let p = || path_param("projectId");
        let id = || path_param("id");
        if suffix != "TenantSingular" {
            paths.insert(
                format!("{prefix}/payment-methods"),
                json!({
                    "get": op("List the entity's payment methods (newest first).", &format!("listPaymentMethods{suffix}"),
                        vec![p(),
                             json!({"name": "limit", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 50}}),
                             json!({"name": "offset", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 0, "maximum": 1000000, "default": 0}}),
                             json!({"name": "type", "in": "query", "required": false, "schema": {"type": "string"}})],
                        None,
                        (200, json!({"description": "The payment methods", "headers": {"X-Total-Count": {"schema": {"type": "string"}}},
                                     "content": {"application/json": {"schema": {"type": "array", "items": schema_ref("PaymentMethod")}}}})),
                        &[]),
                    "post": op("Create a payment method from exactly one of card, encryptedCard or tokenId.", &format!("createPaymentMethod{suffix}"),
                        vec![p(), idempotency_header()], Some(json_body("CreatePaymentMethod")),
                        (201, ok("Created (200: the entity already had this card, which takes this expiry and cvc)", schema_ref("PaymentMethodCreated"))), &[200, 409]),
                }),
            );
            paths.insert(
                format!("{prefix}/payment-methods/{{id}}"),
                json!({
                    "get": op("Get a payment method.", &format!("getPaymentMethod{suffix}"), vec![p(), id()], None,
                        (200, ok("The payment method", schema_ref("PaymentMethod"))), &[]),
                    "delete": op("Delete a payment method; its purchase intents are canceled.", &format!("deletePaymentMethod{suffix}"), vec![p(), id()], None,
                        (204, json!({"description": "Deleted"})), &[]),
                }),
            );
            paths.insert(
                format!("{prefix}/sandbox/authorizations"),
                json!({"post": op("Sandbox issuer: authorize a charge against a credential, enforcing its mandates.", &format!("sandboxAuthorize{suffix}"),
                    vec![p(), idempotency_header()], Some(json_body("Authorization")),
                    (200, ok("Approved or declined", schema_ref("AuthorizationResult"))), &[409])}),
            );
            paths.insert(
                format!("{prefix}/tokens"),
                json!({"post": op("Token vault: store a card for one later tokenId.", &format!("createToken{suffix}"),
                    vec![p(), idempotency_header()], Some(json_body("CreateToken")),
                    (201, ok("The token", schema_ref("Token"))), &[409])}),
            );
            paths.insert(
                format!("{prefix}/client-encryption-key"),
                json!({"get": op("The public key (JWK) for encryptedCard.", &format!("getClientEncryptionKey{suffix}"), vec![p()], None,
                    (200, ok("The current key", schema_ref("Jwk"))), &[])}),
            );
            paths.insert(
                format!("{prefix}/proxy"),
                json!({"post": {
                    "summary": "Forward the request to Svc-Target-URL with credential templates in the JSON body substituted (any method).",
                    "operationId": format!("proxy{suffix}"),
                    "parameters": [p(),
                        {"name": "Svc-Target-URL", "in": "header", "required": true, "schema": {"type": "string", "format": "uri"}}],
                    "requestBody": {"required": false, "content": {"application/json": {"schema": {}}}},
                    "responses": proxy_responses(),
                }}),
            );
        }
        paths.insert(
            format!("{prefix}/{pi}"),
            json!({"post": op("Create a purchase intent (a mandate-bounded credential).", &format!("createPurchaseIntent{suffix}"),
                vec![p(), idempotency_header()], Some(json_body("CreatePurchaseIntent")),
                (201, ok("Created", schema_ref("PurchaseIntent"))), &[409])}),
        );
        paths.insert(
            format!("{prefix}/{pi}/{{id}}"),
            json!({"get": op("Get a purchase intent; the credential while active.", &format!("getPurchaseIntent{suffix}"), vec![p(), id()], None,
                (200, ok("The purchase intent", schema_ref("PurchaseIntent"))), &[])}),
        );
        paths.insert(
            format!("{prefix}/{pi}/{{id}}/verify"),
            json!({"post": op("Verification step of a purchase intent in status verify (public role).", &format!("verifyPurchaseIntent{suffix}"),
                vec![p(), id(), idempotency_header()], Some(json_body("Verify")),
                (200, ok("The verification state", schema_ref("VerifyResult"))), &[409])}),
        );
    }
    let public = |summary: &str, id: &str, content: Value| {
        json!({"get": {"summary": summary, "operationId": id, "security": [],
                        "responses": {"200": {"description": "OK", "content": content}}}})
    };
    paths.insert("/health".into(), public("Liveness.", "health", json!({"application/json": {"schema": {"type": "object", "required": ["status"], "properties": {"status": {"type": "string"}}}}})));
    paths.insert(
        "/metrics".into(),
        public(
            "Prometheus metrics.",
            "metrics",
            json!({"text/plain": {"schema": {"type": "string"}}}),
        ),
    );
    paths.insert(
        "/openapi.json".into(),
        public(
            "This document.",
            "openapi",
            json!({"application/json": {"schema": {"type": "object"}}}),
        ),
    );
    paths
}

fn schemas() -> Value {
    let s = |t: &str| json!({"type": t});
    let credential = json!({"type": "object", "required": ["number", "expirationMonth", "expirationYear"],
        "properties": {"number": s("string"), "expirationMonth": s("string"), "expirationYear": s("string"),
                       "cvc": s("string"), "cryptogram": s("string")}});
    let card_input = json!({"type": "object", "required": ["number", "expirationMonth", "expirationYear", "cvc"],
        "properties": {"number": s("string"), "expirationMonth": s("string"), "expirationYear": s("string"), "cvc": s("string")}});
    let details = json!({"type": "object", "required": ["bin", "last4", "expirationMonth", "expirationYear"],
        "properties": {"bin": s("string"), "last4": s("string"), "expirationMonth": s("string"), "expirationYear": s("string")}});
    let pm = |display: Value| {
        json!({"type": "object",
        "required": ["id", "type", "entityId", "card", "credentialTypes", "createdAt"],
        "properties": {
            "id": s("string"), "type": {"type": "string", "enum": ["card"]}, "entityId": s("string"),
            "card": {"type": "object", "required": ["type", "brand", "details", "display"],
                     "properties": {"type": {"type": "string", "enum": ["debit", "credit"]}, "brand": s("string"),
                                    "details": details.clone(), "display": display}},
            "credentialTypes": {"type": "array", "items": {"type": "string", "enum": ["network-token", "virtual-card", "pan"]}},
            "createdAt": {"type": "string", "format": "date-time"},
            "token": schema_ref("TokenObject"),
        }})
    };
    json!({
        "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "object",
            "required": ["status", "type", "title", "message"],
            "properties": {"status": s("integer"),
                "type": {"type": "string", "enum": ["invalidRequest", "invalidTemplate", "unauthorized", "forbidden", "notFound",
                    "methodNotAllowed", "conflict", "payloadTooLarge", "unsupportedMediaType", "rateLimited", "internalError",
                    "badGateway", "serviceUnavailable", "gatewayTimeout"]},
                "title": s("string"), "message": s("string"), "details": s("object")}}}},
        "PaymentMethod": pm(json!({"type": "object", "properties": {"artUrl": s("string"), "backgroundColor": s("string"),
            "foregroundColor": s("string"), "description": s("string"), "issuerName": s("string")}})),
        "PaymentMethodCreated": pm(json!({"type": "object", "required": ["name", "color"], "properties": {"name": s("string"), "color": s("string")}})),
        "TokenObject": {"type": "object", "required": ["id", "fingerprint", "createdAt", "maskedData"],
            "properties": {"id": s("string"), "fingerprint": s("string"), "createdAt": s("string"), "maskedData": s("string")}},
        "CardInput": card_input,
        "CreatePaymentMethod": {"type": "object", "required": ["entityId"], "properties": {
            "entityId": s("string"), "card": schema_ref("CardInput"), "encryptedCard": s("string"), "tokenId": s("string")}},
        "Mandate": {"type": "object", "required": ["type", "value"], "properties": {
            "type": {"type": "string", "enum": ["maxAmount", "merchantMcc", "expirationDate", "usageLimit", "currency", "mcc"]},
            "value": s("string"), "details": s("object")}},
        "CreatePurchaseIntent": {"type": "object", "required": ["credentialType", "paymentMethodId", "mandates"], "properties": {
            "entityId": s("string"),
            "credentialType": {"type": "string", "enum": ["virtual-card", "network-token", "pan"]},
            "paymentMethodId": s("string"),
            "mandates": {"type": "array", "minItems": 1, "items": schema_ref("Mandate")}}},
        "PurchaseIntent": {"type": "object",
            "required": ["id", "entityId", "credentialType", "paymentMethodId", "status", "createdAt", "expiresAt"],
            "properties": {"id": s("string"), "entityId": s("string"),
                "credentialType": {"type": "string", "enum": ["virtual-card", "network-token", "pan"]},
                "paymentMethodId": s("string"),
                "status": {"type": "string", "enum": ["active", "verify", "unavailable", "expired", "canceled"]},
                "card": credential.clone(), "token": credential.clone(), "pan": credential,
                "mandates": {},
                "createdAt": {"type": "string", "format": "date-time"},
                "expiresAt": {"type": "string", "format": "date-time"}}},
        "Verify": {"type": "object", "properties": {"code": s("string")}},
        "VerifyResult": {"type": "object", "required": ["status"], "properties": {
            "status": s("string"), "nextAction": {"type": "object", "nullable": true}}},
        "Authorization": {"type": "object", "required": ["number", "expirationMonth", "expirationYear", "amount", "currency"],
            "properties": {"number": s("string"), "expirationMonth": s("string"), "expirationYear": s("string"),
                "cvc": s("string"), "cryptogram": s("string"), "amount": s("string"), "currency": s("string"), "mcc": s("string")}},
        "AuthorizationResult": {"type": "object", "required": ["approved"], "properties": {
            "approved": s("boolean"), "declineReason": s("string")}},
        "CreateToken": {"type": "object", "properties": {"card": schema_ref("CardInput"), "encryptedCard": s("string")}},
        "Token": {"type": "object", "required": ["id", "fingerprint", "createdAt", "maskedData", "expiresAt"], "properties": {
            "id": s("string"), "fingerprint": s("string"), "createdAt": s("string"), "maskedData": s("string"), "expiresAt": s("string")}},
        "Jwk": {"type": "object", "required": ["kty", "kid"], "properties": {
            "kty": s("string"), "crv": s("string"), "x": s("string"), "y": s("string"), "kid": s("string"), "use": s("string"), "alg": s("string")}},
    })
}

/// The whole document.
pub fn document() -> Value {
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "paycred",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Payment credential service: payment methods, purchase intents, the credential proxy. Every error has the envelope {error: {status, type, title, message, details?}}.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": paths(),
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}},
            "schemas": schemas(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_form_is_described_and_refs_resolve() {
        let doc = document();
        let paths = doc["paths"].as_object().map(|p| p.len()).unwrap_or(0);
        assert_eq!(paths, 2 * 9 + 3 + 3);
        let text = doc.to_string();
        let schemas = &doc["components"]["schemas"];
        for part in text.split("#/components/schemas/").skip(1) {
            let name: String = part.chars().take_while(|c| c.is_alphanumeric()).collect();
            assert!(schemas.get(&name).is_some(), "{name}");
        }
        for path in doc["paths"].as_object().into_iter().flat_map(|p| p.keys()) {
            let concrete = path.replace("{projectId}", "p1").replace("{id}", "x1");
            assert!(
                crate::edge::routes::route(&concrete).is_some(),
                "{path} is not a route"
            );
        }
    }
}
