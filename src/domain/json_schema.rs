//! What the published JSON Schemas of contract §2 (`crate::documents::schemas`) need from the message
//! types that derive them, kept beside those types so that the domain imports nothing from
//! above it.

use schemars::Schema;
use serde_json::Value;

/// A `transform` for the schema of a set of message headers: a header is present with a
/// string value or absent, never null, so the optional ones (`Option` fields, not
/// required) lose the `null` their type would add.
pub(crate) fn headers_are_strings(schema: &mut Schema) {
    let Some(Value::Object(properties)) = schema.get_mut("properties") else {
        return;
    };
    for property in properties.values_mut() {
        if let Some(Value::Array(types)) = property.get_mut("type") {
            types.retain(|t| t != "null");
            if let [only] = types.as_slice() {
                let only = only.clone();
                property["type"] = only;
            }
        }
    }
}
