//! Operators' tokens as `[[operators]]` holds them: minted by `onecharge operators
//! new-token`, recognised by the admin HTTP by their SHA-256. Here, below both faces, so that
//! the command line and the HTTP face share them without importing each other.

use rand::RngCore as _;
use secrecy::SecretString;
use sha2::{Digest as _, Sha256};

/// A new operator token and the hex SHA-256 to put in `[[operators]]`: 32 random bytes
/// from the operating system, as 64 hex digits after an `oc_` prefix that makes a leaked
/// token easy to recognise.
pub fn mint_token() -> (SecretString, String) {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    let token = format!("oc_{}", hex::encode(bytes));
    let hash = token_sha256(&token);
    (SecretString::from(token), hash)
}

/// The hex SHA-256 of `token`, as `[[operators]] token_sha256` holds it.
pub fn token_sha256(token: &str) -> String {
    hex::encode(Sha256::digest(token.trim().as_bytes()))
}
