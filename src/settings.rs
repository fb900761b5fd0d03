//! `KEY=VALUE` overrides of serialisable settings: the `--set` of every command, the grid
//! values of `sweep` and `swiss-roll --grid`.

use crate::error::{CliError, Result};

/// Applies one `key=value` override (a dotted key reaches into tables; the value is read as TOML,
/// or as a string when it is not valid TOML) to a serialisable config.
pub fn set<T>(config: &T, assignment: &str) -> Result<T>
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    let bad = |why: &str| CliError::invalid("--set", format!("{assignment:?}"), why);
    let (key, raw) = assignment
        .split_once('=')
        .ok_or_else(|| bad("expected KEY=VALUE"))?;
    let value: toml::Value = toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()));
    let mut root = toml::Value::try_from(config).map_err(|e| bad(&e.to_string()))?;
    let mut slot = &mut root;
    for part in key.trim().split('.') {
        slot = slot
            .get_mut(part)
            .ok_or_else(|| bad(&format!("no setting named {key:?}")))?;
    }
    // A value of another type than the current one is tried too (a setting may take a number
    // or a name, like the swiss roll's `data_scale`); the settings' own types decide.
    let retyped = (std::mem::discriminant(slot) != std::mem::discriminant(&value)
        && !(slot.is_float() && value.is_integer()))
    .then(|| format!("expected a value like {slot}"));
    *slot = match (slot.is_float(), value) {
        (true, toml::Value::Integer(i)) => toml::Value::Float(i as f64),
        (_, v) => v,
    };
    root.try_into()
        .map_err(|e: toml::de::Error| match &retyped {
            Some(expected) => bad(&format!("{expected} ({})", e.message())),
            None => bad(&e.to_string()),
        })
}
