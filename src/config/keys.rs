//! JWT key files in the formats operators have at hand. The algorithm follows the key:
//! RSA (2048 bits or more) → RS256, P-256 → ES256, Ed25519 → EdDSA.
//!
//! | key | accepted PEM |
//! |---|---|
//! | public (`projects[].jwt.keys[].public_key_file`) | `PUBLIC KEY` (SPKI), `RSA PUBLIC KEY` (PKCS#1), `CERTIFICATE` (its key) |
//! | private (`paycred jwt --key`) | `PRIVATE KEY` (PKCS#8), `RSA PRIVATE KEY` (PKCS#1), `EC PRIVATE KEY` (SEC1) |
//!
//! Every form is read by OpenSSL and handed to `jsonwebtoken` as SPKI or PKCS#8. A key that
//! does not fit says what it is and what would work.

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey};
use openssl::nid::Nid;
use openssl::pkey::{HasPublic, Id, PKey, PKeyRef, Private};
use openssl::rsa::Rsa;
use openssl::x509::X509;
use zeroize::Zeroizing;

/// What a public key file may hold.
const PUBLIC_FORMS: &str = "a PEM public key (PUBLIC KEY, RSA PUBLIC KEY) or certificate \
                            (CERTIFICATE) of an RSA (2048+ bits), P-256 or Ed25519 key";
/// What a private key file may hold.
const PRIVATE_FORMS: &str = "a PEM private key (PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY) \
                             of an RSA (2048+ bits), P-256 or Ed25519 key";

/// The labels of the PEM blocks in `pem`, for a message about what was found.
fn labels(pem: &[u8]) -> String {
    let text = String::from_utf8_lossy(pem);
    let found: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("-----BEGIN "))
        .filter_map(|l| l.strip_suffix("-----"))
        .collect();
    match found.as_slice() {
        [] => "no PEM block".to_string(),
        labels => format!("a PEM {}", labels.join(", ")),
    }
}

/// The algorithm of a key, or why it has none.
fn algorithm<T: HasPublic>(key: &PKeyRef<T>) -> Result<Algorithm, String> {
    match key.id() {
        Id::RSA if key.bits() >= 2048 => Ok(Algorithm::RS256),
        Id::RSA => Err(format!(
            "an RSA key of {} bits (RS256 needs 2048 or more)",
            key.bits()
        )),
        Id::EC => {
            let curve = key.ec_key().ok().and_then(|ec| ec.group().curve_name());
            match curve {
                Some(Nid::X9_62_PRIME256V1) => Ok(Algorithm::ES256),
                Some(nid) => Err(format!(
                    "an EC key on {} (ES256 needs P-256)",
                    nid.short_name().unwrap_or("another curve")
                )),
                None => Err("an EC key on an unnamed curve (ES256 needs P-256)".into()),
            }
        }
        Id::ED25519 => Ok(Algorithm::EdDSA),
        _ => Err("a key of a type JWTs are not signed with here".into()),
    }
}

/// The public key of `pem` and its algorithm, or what was found and what would work.
pub fn public_key(pem: &[u8]) -> Result<(Algorithm, DecodingKey), String> {
    let key = PKey::public_key_from_pem(pem)
        .or_else(|_| Rsa::public_key_from_pem_pkcs1(pem).and_then(PKey::from_rsa))
        .or_else(|_| X509::from_pem(pem).and_then(|cert| cert.public_key()))
        .map_err(|_| format!("found {}; expected {PUBLIC_FORMS}", labels(pem)))?;
    let alg = algorithm(&key).map_err(|e| format!("found {e}; expected {PUBLIC_FORMS}"))?;
    decoding(&key, alg)
}

fn decoding<T: HasPublic>(
    key: &PKey<T>,
    alg: Algorithm,
) -> Result<(Algorithm, DecodingKey), String> {
    let spki = key
        .public_key_to_pem()
        .map_err(|e| format!("the key could not be read: {e}"))?;
    let decoding = match alg {
        Algorithm::RS256 => DecodingKey::from_rsa_pem(&spki),
        Algorithm::ES256 => DecodingKey::from_ec_pem(&spki),
        _ => DecodingKey::from_ed_pem(&spki),
    }
    .map_err(|e| format!("the key could not be read: {e}"))?;
    Ok((alg, decoding))
}

/// The private key of `pem` and its algorithm, or what was found and what would work.
pub fn private_key(pem: &[u8]) -> Result<(Algorithm, EncodingKey), String> {
    let key = PKey::private_key_from_pem(pem)
        .or_else(|_| ed25519_with_public_key(pem))
        .map_err(|_| format!("found {}; expected {PRIVATE_FORMS}", labels(pem)))?;
    let alg = algorithm(&key).map_err(|e| format!("found {e}; expected {PRIVATE_FORMS}"))?;
    let pkcs8 = Zeroizing::new(
        key.private_key_to_pem_pkcs8()
            .map_err(|e| format!("the key could not be read: {e}"))?,
    );
    let encoding = match alg {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(&pkcs8),
        Algorithm::ES256 => EncodingKey::from_ec_pem(&pkcs8),
        _ => EncodingKey::from_ed_pem(&pkcs8),
    }
    .map_err(|e| format!("the key could not be read: {e}"))?;
    Ok((alg, encoding))
}

/// An Ed25519 PKCS#8 key in its second version (RFC 5958: the public key alongside, as
/// written by some libraries), which the OpenSSL linked here does not read.
fn ed25519_with_public_key(pem: &[u8]) -> Result<PKey<Private>, ()> {
    use ed25519_dalek::pkcs8::DecodePrivateKey;
    let text = std::str::from_utf8(pem).map_err(drop)?;
    let signing = ed25519_dalek::SigningKey::from_pkcs8_pem(text).map_err(drop)?;
    let seed = Zeroizing::new(signing.to_bytes());
    PKey::private_key_from_raw_bytes(seed.as_slice(), Id::ED25519).map_err(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use openssl::ec::{EcGroup, EcKey};

    fn ok<T>(r: Result<T, String>) -> T {
        r.unwrap_or_else(|e| unreachable!("{e}"))
    }

    #[test]
    fn every_listed_form_is_read() {
        let rsa = ok(Rsa::generate(2048).map_err(|e| e.to_string()));
        let group: EcGroup =
            ok(EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).map_err(|e| e.to_string()));
        let ec = ok(EcKey::generate(&group).map_err(|e| e.to_string()));
        let ed = ok(PKey::generate_ed25519().map_err(|e| e.to_string()));
        let pem = |r: Result<Vec<u8>, openssl::error::ErrorStack>| ok(r.map_err(|e| e.to_string()));
        // Private: PKCS#8 and the traditional forms.
        for (key, want) in [
            (pem(rsa.private_key_to_pem()), Algorithm::RS256),
            (pem(ec.private_key_to_pem()), Algorithm::ES256),
            (
                pem(ok(PKey::from_ec_key(ec.clone()).map_err(|e| e.to_string()))
                    .private_key_to_pem_pkcs8()),
                Algorithm::ES256,
            ),
            (pem(ed.private_key_to_pem_pkcs8()), Algorithm::EdDSA),
        ] {
            assert_eq!(ok(private_key(&key)).0, want);
        }
        assert!(String::from_utf8_lossy(&pem(ec.private_key_to_pem())).contains("EC PRIVATE KEY"));
        // Public: SPKI, PKCS#1 and a certificate.
        for (key, want) in [
            (pem(rsa.public_key_to_pem()), Algorithm::RS256),
            (pem(rsa.public_key_to_pem_pkcs1()), Algorithm::RS256),
            (pem(ec.public_key_to_pem()), Algorithm::ES256),
            (pem(ed.public_key_to_pem()), Algorithm::EdDSA),
            (certificate(&ed), Algorithm::EdDSA),
        ] {
            assert_eq!(ok(public_key(&key)).0, want);
        }
    }

    #[test]
    fn an_ed25519_key_with_its_public_key_alongside_is_read() {
        use ed25519_dalek::pkcs8::{spki::der::pem::LineEnding, EncodePrivateKey};
        let signing = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
        let v2 = ok(signing
            .to_pkcs8_pem(LineEnding::LF)
            .map_err(|e| e.to_string()));
        assert_eq!(ok(private_key(v2.as_bytes())).0, Algorithm::EdDSA);
    }

    fn certificate(key: &PKey<openssl::pkey::Private>) -> Vec<u8> {
        let e = |e: openssl::error::ErrorStack| e.to_string();
        let mut name = ok(openssl::x509::X509NameBuilder::new().map_err(e));
        ok(name.append_entry_by_text("CN", "paycred test").map_err(e));
        let name = name.build();
        let mut b = ok(openssl::x509::X509Builder::new().map_err(e));
        ok(b.set_version(2).map_err(e));
        let serial = ok(openssl::bn::BigNum::from_u32(1)
            .and_then(|n| n.to_asn1_integer())
            .map_err(e));
        ok(b.set_serial_number(&serial).map_err(e));
        ok(b.set_subject_name(&name).map_err(e));
        ok(b.set_issuer_name(&name).map_err(e));
        let not_before = ok(openssl::asn1::Asn1Time::days_from_now(0).map_err(e));
        let not_after = ok(openssl::asn1::Asn1Time::days_from_now(1).map_err(e));
        ok(b.set_not_before(&not_before).map_err(e));
        ok(b.set_not_after(&not_after).map_err(e));
        ok(b.set_pubkey(key).map_err(e));
        ok(b.sign(key, openssl::hash::MessageDigest::null()).map_err(e));
        ok(b.build().to_pem().map_err(e))
    }

    #[test]
    fn a_key_that_does_not_fit_says_what_it_is_and_what_works() {
        let small = Rsa::generate(1024).map(|r| r.private_key_to_pem());
        let small = small.ok().and_then(Result::ok).unwrap_or_default();
        let e = private_key(&small).err().unwrap_or_default();
        assert!(
            e.contains("1024 bits") && e.contains("EC PRIVATE KEY"),
            "{e}"
        );
        let e = public_key(
            b"-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n",
        )
        .err()
        .unwrap_or_default();
        assert!(
            e.contains("found a PEM OPENSSH PRIVATE KEY") && e.contains("CERTIFICATE"),
            "{e}"
        );
        let e = private_key(b"not a key").err().unwrap_or_default();
        assert!(e.starts_with("found no PEM block"), "{e}");
    }
}
