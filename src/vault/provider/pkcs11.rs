//! `provider: pkcs11`: the root key wrapped by an AES key that stays in a PKCS#11 token (an
//! HSM), through the `cryptoki` crate over the vendor's module.
//!
//! The mechanism is `CKM_AES_KEY_WRAP_PAD` (AES key wrap with padding, RFC 5649) through
//! `C_WrapKey` and `C_UnwrapKey`: made for wrapping keys, deterministic (no IV for paycred to
//! choose or the token to insist on choosing), and its integrity check refuses a wrapped key
//! that was altered or is opened by another key. The token's key needs `CKA_WRAP` and
//! `CKA_UNWRAP` and may be sensitive and unextractable (it should be). The root key is made by
//! the token's random generator as a session object, wrapped, read, and destroyed; at start
//! it is unwrapped into a session object, read, and destroyed: it exists in the token only
//! for the length of one call, and the token's key never leaves it.
//!
//! Each use loads the module, finds the token by label, logs in with the PIN, does its one
//! operation and finalizes the module again, so that two providers on one module (a rotation
//! between two tokens) each initialize it afresh.

use super::root_key;
use crate::config::master_key::{Pkcs11Provider, SecretSource};
use crate::secret::KeyMaterial;
use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::error::{Error, RvError};
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, AttributeType, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::{Session, UserType};
use zeroize::{Zeroize, Zeroizing};

/// The wrapping mechanism, as the wrapped key file names it.
pub const MECHANISM: &str = "CKM_AES_KEY_WRAP_PAD";

/// An initialized module, finalized on drop.
struct Module(Pkcs11);

impl Drop for Module {
    fn drop(&mut self) {
        let _ = self.0.clone().finalize();
    }
}

/// A logged-in session on the configured token, with its wrapping key. (Fields drop in
/// order: the session closes before the module is finalized.)
struct Token<'a> {
    session: Session,
    key: ObjectHandle,
    config: &'a Pkcs11Provider,
    _module: Module,
}

impl Token<'_> {
    /// The message of a failed call on the token.
    fn failed(&self, what: &str, e: Error) -> String {
        failed(self.config, what, e)
    }
}

fn failed(config: &Pkcs11Provider, what: &str, e: Error) -> String {
    format!(
        "token {:?}: {what} failed: {}",
        config.token_label,
        short(&e)
    )
}

/// Opens the root key that [`wrap_new`] wrapped.
pub fn unwrap(config: &Pkcs11Provider, wrapped: &[u8]) -> Result<KeyMaterial, String> {
    let token = open(config)?;
    let session = &token.session;
    let template = [
        Attribute::Class(ObjectClass::SECRET_KEY),
        Attribute::KeyType(KeyType::GENERIC_SECRET),
        Attribute::Token(false),
        Attribute::Sensitive(false),
        Attribute::Extractable(true),
    ];
    let root = session
        .unwrap_key(&Mechanism::AesKeyWrapPad, token.key, wrapped, &template)
        .map_err(|e| {
            let hint = match &e {
                Error::Pkcs11(RvError::WrappedKeyInvalid | RvError::EncryptedDataInvalid, _) => {
                    " (the wrapped key file was made by another key, or altered)"
                }
                _ => "",
            };
            format!(
                "{}{hint}",
                token.failed(&format!("unwrapping with key {:?}", config.key_label), e)
            )
        })?;
    read_and_destroy(&token, root)
}

/// A new root key from the token's random generator, and the root key wrapped by the token's
/// key.
pub fn wrap_new(config: &Pkcs11Provider) -> Result<(KeyMaterial, Vec<u8>), String> {
    let token = open(config)?;
    let session = &token.session;
    let template = [
        Attribute::Class(ObjectClass::SECRET_KEY),
        Attribute::KeyType(KeyType::GENERIC_SECRET),
        Attribute::ValueLen(32.into()),
        Attribute::Token(false),
        Attribute::Sensitive(false),
        Attribute::Extractable(true),
    ];
    let root = session
        .generate_key(&Mechanism::GenericSecretKeyGen, &template)
        .map_err(|e| token.failed("generating a root key", e))?;
    let wrapped = session.wrap_key(&Mechanism::AesKeyWrapPad, token.key, root);
    let wrapped = match wrapped {
        Ok(w) => w,
        Err(e) => {
            let _ = session.destroy_object(root);
            return Err(token.failed(&format!("wrapping with key {:?}", config.key_label), e));
        }
    };
    let key = read_and_destroy(&token, root)?;
    drop(token);
    // The file is only written once the token is known to open it again (a key allowed to
    // wrap but not to unwrap would leave a root key nothing can open).
    if unwrap(config, &wrapped)? != key {
        return Err("the token unwrapped the new root key to other bytes".into());
    }
    Ok((key, wrapped))
}

/// The 32 bytes of the session object `root`, which is destroyed.
fn read_and_destroy(token: &Token<'_>, root: ObjectHandle) -> Result<KeyMaterial, String> {
    let session = &token.session;
    let read = session.get_attributes(root, &[AttributeType::Value]);
    let _ = session.destroy_object(root);
    let mut attributes = read.map_err(|e| token.failed("reading the root key", e))?;
    let mut value = Zeroizing::new(Vec::new());
    for attribute in &mut attributes {
        if let Attribute::Value(bytes) = attribute {
            std::mem::swap(&mut *value, bytes);
        }
    }
    for attribute in &mut attributes {
        if let Attribute::Value(bytes) = attribute {
            bytes.zeroize();
        }
    }
    root_key(&value)
}

/// Loads the module, finds the token, logs in and finds the wrapping key: each failure says
/// which of them.
fn open(config: &Pkcs11Provider) -> Result<Token<'_>, String> {
    let path = config.module.display();
    let pkcs11 = Pkcs11::new(&config.module)
        .map_err(|e| format!("module {path} does not load: {}", short(&e)))?;
    pkcs11
        .initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
        .map_err(|e| format!("module {path}: C_Initialize failed: {}", short(&e)))?;
    // From here the module is finalized on drop, whatever fails.
    let module = Module(pkcs11.clone());
    let slots = pkcs11
        .get_slots_with_token()
        .map_err(|e| format!("module {path}: listing its slots failed: {}", short(&e)))?;
    let mut labels = Vec::new();
    let mut found = None;
    for slot in slots {
        let Ok(info) = pkcs11.get_token_info(slot) else {
            continue;
        };
        let label = info.label().trim_end().to_string();
        if label == config.token_label && found.is_none() {
            found = Some(slot);
        }
        labels.push(format!("{label:?}"));
    }
    let Some(slot) = found else {
        return Err(format!(
            "module {path} has no token labelled {:?} (its tokens: {})",
            config.token_label,
            if labels.is_empty() {
                "none".to_string()
            } else {
                labels.join(", ")
            }
        ));
    };
    let session = pkcs11
        .open_ro_session(slot)
        .map_err(|e| failed(config, "opening a session", e))?;
    let pin = read_pin(&config.pin)?;
    session
        .login(
            UserType::User,
            Some(&cryptoki::types::AuthPin::from(pin.as_str())),
        )
        .map_err(|e| match e {
            Error::Pkcs11(RvError::PinIncorrect, _) => format!(
                "token {:?} refused the PIN from {} (wrong PIN)",
                config.token_label, config.pin
            ),
            Error::Pkcs11(RvError::PinLocked, _) => format!(
                "token {:?}: the user PIN is locked (too many wrong PINs)",
                config.token_label
            ),
            e => failed(
                config,
                &format!("logging in with the PIN from {}", config.pin),
                e,
            ),
        })?;
    let keys = session
        .find_objects(&[
            Attribute::Class(ObjectClass::SECRET_KEY),
            Attribute::Label(config.key_label.as_bytes().to_vec()),
        ])
        .map_err(|e| failed(config, "looking for the key", e))?;
    let key = match keys.as_slice() {
        [key] => *key,
        [] => {
            return Err(format!(
                "token {:?} has no secret key labelled {:?}",
                config.token_label, config.key_label
            ))
        }
        _ => {
            return Err(format!(
                "token {:?} has {} secret keys labelled {:?}: give the wrapping key a label of \
                 its own",
                config.token_label,
                keys.len(),
                config.key_label
            ))
        }
    };
    Ok(Token {
        session,
        key,
        config,
        _module: module,
    })
}

/// The PIN from its file (one line; the line end is not part of it) or variable.
fn read_pin(source: &SecretSource) -> Result<Zeroizing<String>, String> {
    let pin = match source {
        SecretSource::File(path) => Zeroizing::new(
            std::fs::read_to_string(path).map_err(|e| format!("cannot read {source}: {e}"))?,
        ),
        SecretSource::Env(name) => Zeroizing::new(
            std::env::var(name).map_err(|_| format!("{source}: the variable is not set"))?,
        ),
    };
    let trimmed = pin.trim_end_matches(['\r', '\n']);
    if trimmed.is_empty() {
        return Err(format!("{source}: the PIN is empty"));
    }
    Ok(Zeroizing::new(trimmed.to_string()))
}

/// A cryptoki error in a few words (its `Display` of a PKCS#11 code is the specification's
/// paragraph): the failed function and the return value's name.
fn short(e: &Error) -> String {
    match e {
        Error::Pkcs11(rv, function) => format!("{function}: {rv:?}"),
        Error::LibraryLoading(e) => e.to_string(),
        e => e.to_string(),
    }
}
