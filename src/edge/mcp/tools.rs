//! The MCP tools: each calls the handler its REST route calls and shows a view of the answer
//! that never holds a card number, CVC or cryptogram (an intent's credential, `pan` ones
//! too, shows its last four digits only). A browser session's stand-in card is shown: its
//! values are not the card's.
//!
//! Every tool has an input schema and an output schema; a result carries its view as
//! `structuredContent` and as JSON text. A failure is a result with `isError` whose text is
//! the API's error envelope as JSON (`{"error": {status, type, title, message, details}}`),
//! without `structuredContent` (which clients check against the output schema).

use super::pay;
use crate::api::{browser_sessions, payment_methods, purchase_intents};
use crate::app::App;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::http::Response;
use serde_json::{json, Map, Value};

/// What a tool runs as.
pub struct Caller<'a> {
    pub app: &'a App,
    pub principal: &'a Principal,
    /// The caller's `Authorization` value (for [`pay`]).
    pub bearer: &'a str,
}

/// The tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    ListPaymentMethods,
    CreatePurchaseIntent,
    GetPurchaseIntent,
    CancelPurchaseIntent,
    Pay,
    CreateBrowserSession,
}

const ALL: [Tool; 6] = [
    Tool::ListPaymentMethods,
    Tool::CreatePurchaseIntent,
    Tool::GetPurchaseIntent,
    Tool::CancelPurchaseIntent,
    Tool::Pay,
    Tool::CreateBrowserSession,
];

/// `tools/list`'s tools.
pub fn list() -> Vec<Value> {
    ALL.iter().map(|t| t.describe()).collect()
}

impl Tool {
    pub fn named(name: &str) -> Option<Tool> {
        ALL.into_iter().find(|t| t.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Tool::ListPaymentMethods => "list_payment_methods",
            Tool::CreatePurchaseIntent => "create_purchase_intent",
            Tool::GetPurchaseIntent => "get_purchase_intent",
            Tool::CancelPurchaseIntent => "cancel_purchase_intent",
            Tool::Pay => "pay",
            Tool::CreateBrowserSession => "create_browser_session",
        }
    }

    /// The tool as `tools/list` shows it.
    fn describe(self) -> Value {
        let (title, description, input, output) = match self {
            Tool::ListPaymentMethods => (
                "List payment methods",
                "The user's stored cards: id, brand, last four digits, expiry and the \
                 credential types a purchase intent may ask for. Never a card number.",
                object(
                    json!({"limit": {"type": "integer", "minimum": 1, "maximum": 100,
                    "description": "At most this many (default 50)."}}),
                    &[],
                ),
                object(
                    json!({"paymentMethods": {"type": "array", "items": payment_method_schema()}}),
                    &["paymentMethods"],
                ),
            ),
            Tool::CreatePurchaseIntent => (
                "Create a purchase intent",
                "Asks for a credential of a payment method, bounded by mandates (maxAmount \
                 with currency, merchantMcc, expirationDate, usageLimit, merchant: the one \
                 merchant id it may pay). Returns its id, \
                 status, the credential's last four digits, expiresAt and nextAction: pay \
                 with `pay` (templates name the payment method and credential type), or \
                 wait for the cardholder's verification.",
                object(
                    json!({
                        "paymentMethodId": {"type": "string"},
                        "credentialType": {"type": "string",
                            "enum": ["virtual-card", "network-token", "pan"]},
                        "mandates": {"type": "array", "minItems": 1, "items": {
                            "type": "object",
                            "properties": {
                                "type": {"type": "string", "enum": ["maxAmount", "merchantMcc",
                                    "expirationDate", "usageLimit", "currency", "mcc",
                                    "merchant"]},
                                "value": {"type": "string"},
                                "details": {"type": "object"}
                            },
                            "required": ["type", "value"]
                        }, "description": "e.g. {\"type\": \"maxAmount\", \"value\": \"25.00\", \
                            \"details\": {\"currency\": \"USD\"}}"}
                    }),
                    &["paymentMethodId", "credentialType", "mandates"],
                ),
                intent_schema(),
            ),
            Tool::GetPurchaseIntent => (
                "Get a purchase intent",
                "A purchase intent's status, mandates, expiry and the credential's last four \
                 digits.",
                object(json!({"id": {"type": "string"}}), &["id"]),
                intent_schema(),
            ),
            Tool::CancelPurchaseIntent => (
                "Cancel a purchase intent",
                "Ends a purchase intent for good: its credential can no longer pay.",
                object(json!({"id": {"type": "string"}}), &["id"]),
                intent_schema(),
            ),
            Tool::Pay => (
                "Pay through paycred's proxy",
                "Sends an HTTP request to a payment API through paycred, which fills in the \
                 card values the body's templates name, e.g. \"{{ paymentMethod: pm_… | type: \
                 'virtual-card' | json: '$.number' }}\" (fields $.number, $.cvc, \
                 $.expirationMonth, $.expirationYear, $.cryptogram). Needs an active purchase \
                 intent of that type. Returns the target's status, headers and body, with any \
                 card number in it masked.",
                object(
                    json!({
                        "method": {"type": "string",
                            "enum": ["GET", "POST", "PUT", "PATCH", "DELETE"]},
                        "url": {"type": "string", "description": "The target (https)."},
                        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                        "body": {"description": "A JSON value (sent as application/json unless \
                            headers say otherwise) or a string (a form or XML body)."}
                    }),
                    &["method", "url"],
                ),
                object(
                    json!({
                        "status": {"type": "integer"},
                        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                        "body": {"description": "JSON when the target answered JSON, else text."}
                    }),
                    &["status", "headers"],
                ),
            ),
            Tool::CreateBrowserSession => (
                "Create a browser session",
                "For paying in a browser: stand-in card values to type into the merchant's \
                 form, and the proxy (url, username, password, CA certificate) the browser \
                 must use; paycred swaps in the real values on requests to the allowed hosts. \
                 The stand-ins are not the card's values.",
                object(
                    json!({
                        "purchaseIntentId": {"type": "string"},
                        "allowedHosts": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                        "ttl": {"type": "integer", "minimum": 1, "description": "Seconds."}
                    }),
                    &["purchaseIntentId", "allowedHosts"],
                ),
                object(
                    json!({
                        "id": {"type": "string"},
                        "purchaseIntentId": {"type": "string"},
                        "status": {"type": "string"},
                        "allowedHosts": {"type": "array", "items": {"type": "string"}},
                        "expiresAt": {"type": "string"},
                        "card": {"type": "object", "properties": {
                            "number": {"type": "string"},
                            "expirationMonth": {"type": "string"},
                            "expirationYear": {"type": "string"},
                            "cvc": {"type": "string"}
                        }},
                        "proxy": {"type": "object", "properties": {
                            "url": {"type": "string"},
                            "username": {"type": "string"},
                            "password": {"type": "string"}
                        }},
                        "caCertificate": {"type": "string"}
                    }),
                    &["id", "status"],
                ),
            ),
        };
        json!({
            "name": self.name(),
            "title": title,
            "description": description,
            "inputSchema": input,
            "outputSchema": output,
        })
    }

    /// Runs the tool: its result, or a tool error.
    pub async fn call(self, caller: &Caller<'_>, args: &Map<String, Value>) -> Value {
        match self.run(caller, args).await {
            Ok(view) => json!({
                "content": [{"type": "text", "text": view.to_string()}],
                "structuredContent": view,
                "isError": false,
            }),
            // No `structuredContent`: clients check it against the output schema, errors
            // too (the TypeScript SDK does).
            Err(e) => json!({
                "content": [{"type": "text", "text": e.to_envelope().to_string()}],
                "isError": true,
            }),
        }
    }

    async fn run(self, c: &Caller<'_>, args: &Map<String, Value>) -> ApiResult<Value> {
        let (app, principal) = (c.app, c.principal);
        match self {
            Tool::ListPaymentMethods => {
                let query = match args.get("limit") {
                    None | Some(Value::Null) => None,
                    Some(Value::Number(n)) => Some(format!("limit={n}")),
                    Some(_) => return Err(ApiError::invalid_field("limit", "must be an integer")),
                };
                let listed = payment_methods::list(app, principal, query.as_deref()).await?;
                let items = body_of(&listed)?;
                let methods: Vec<Value> = items
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(payment_method_view)
                    .collect();
                Ok(json!({ "paymentMethods": methods }))
            }
            Tool::CreatePurchaseIntent => {
                let mut body = args.clone();
                body.remove("entityId");
                let body = Value::Object(body).to_string();
                let created = purchase_intents::create(app, principal, body.as_bytes()).await?;
                intent_view(&created)
            }
            Tool::GetPurchaseIntent => {
                let id = string_arg(args, "id")?;
                intent_view(&purchase_intents::get(app, principal, id).await?)
            }
            Tool::CancelPurchaseIntent => {
                let id = string_arg(args, "id")?;
                intent_view(&purchase_intents::cancel(app, principal, id).await?)
            }
            Tool::Pay => pay::pay(app, principal, c.bearer, args).await,
            Tool::CreateBrowserSession => {
                let intent = string_arg(args, "purchaseIntentId")?;
                let mut body = args.clone();
                body.remove("purchaseIntentId");
                let body = Value::Object(body).to_string();
                let created =
                    browser_sessions::create(app, principal, intent, body.as_bytes()).await?;
                body_of(&created)
            }
        }
    }
}

/// An object schema of these properties.
fn object(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
    })
}

fn payment_method_schema() -> Value {
    object(
        json!({
            "id": {"type": "string"},
            "brand": {"type": "string"},
            "last4": {"type": "string"},
            "expirationMonth": {"type": "string"},
            "expirationYear": {"type": "string"},
            "credentialTypes": {"type": "array", "items": {"type": "string"}}
        }),
        &["id", "brand", "last4"],
    )
}

fn intent_schema() -> Value {
    object(
        json!({
            "id": {"type": "string"},
            "status": {"type": "string",
                "enum": ["active", "verify", "unavailable", "expired", "canceled"]},
            "credentialType": {"type": "string"},
            "paymentMethodId": {"type": "string"},
            "last4": {"type": ["string", "null"],
                "description": "The credential's last four digits while the intent is active."},
            "mandates": {"type": "object"},
            "createdAt": {"type": "string"},
            "expiresAt": {"type": "string"},
            "nextAction": {"type": ["object", "null"], "properties": {
                "type": {"type": "string", "enum": ["pay", "verify"]},
                "message": {"type": "string"}
            }}
        }),
        &["id", "status", "expiresAt"],
    )
}

/// A handler's JSON answer.
fn body_of(response: &Response) -> ApiResult<Value> {
    let body = response.body.as_deref().unwrap_or(b"null");
    serde_json::from_slice(body).map_err(|_| ApiError::internal())
}

fn string_arg<'a>(args: &'a Map<String, Value>, name: &str) -> ApiResult<&'a str> {
    match args.get(name) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        None | Some(Value::Null) => Err(ApiError::invalid_field(name, "required")),
        Some(_) => Err(ApiError::invalid_field(name, "must be a non-empty string")),
    }
}

/// A listed payment method: no bin, no display, no token.
fn payment_method_view(pm: &Value) -> Value {
    let card = &pm["card"];
    let details = &card["details"];
    json!({
        "id": pm["id"],
        "brand": card["brand"],
        "last4": details["last4"],
        "expirationMonth": details["expirationMonth"],
        "expirationYear": details["expirationYear"],
        "credentialTypes": pm["credentialTypes"],
    })
}

/// An intent without its credential: the credential's last four digits only.
fn intent_view(response: &Response) -> ApiResult<Value> {
    let intent = body_of(response)?;
    let credential = ["card", "token", "pan"]
        .iter()
        .find_map(|k| intent.get(*k).filter(|c| c.is_object()));
    let last4 = credential
        .and_then(|c| c["number"].as_str())
        .and_then(|n| n.get(n.len().saturating_sub(4)..))
        .map(str::to_string);
    let status = intent["status"].as_str().unwrap_or_default();
    let next_action = match status {
        "active" => json!({
            "type": "pay",
            "message": format!(
                "Pay with the pay tool: put templates such as {{{{ paymentMethod: {} | type: \
                 '{}' | json: '$.number' }}}} where the card values go; or create_browser_session \
                 to pay in a browser.",
                intent["paymentMethodId"].as_str().unwrap_or_default(),
                intent["credentialType"].as_str().unwrap_or_default(),
            ),
        }),
        "verify" => json!({
            "type": "verify",
            "message": "The cardholder must verify this purchase intent (a code sent by the \
                issuer, or a passkey) before it can pay; then get_purchase_intent shows it \
                active.",
        }),
        _ => Value::Null,
    };
    Ok(json!({
        "id": intent["id"],
        "status": intent["status"],
        "credentialType": intent["credentialType"],
        "paymentMethodId": intent["paymentMethodId"],
        "last4": last4,
        "mandates": intent["mandates"],
        "createdAt": intent["createdAt"],
        "expiresAt": intent["expiresAt"],
        "nextAction": next_action,
    }))
}
