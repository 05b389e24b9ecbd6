//! The web origins `admin_public_origins` lists, read the way browsers send them in `Origin`
//! (so that the setting is checked when it is loaded, and the admin listener compares like
//! with like).

/// A web origin as browsers send it in `Origin` and as `admin_public_origins` lists them:
/// scheme, host and port (the scheme's default when not written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebOrigin {
    pub(crate) scheme: String,
    /// Lower case; an IPv6 address in brackets, as in a `Host` header.
    pub(crate) host: String,
    pub(crate) port: u16,
}

impl WebOrigin {
    /// `http(s)://host[:port]`, nothing more (a trailing `/` is allowed): the origin of the
    /// console as the browser's address bar shows it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let url = reqwest::Url::parse(text)
            .map_err(|_| format!("`{text}` is not an origin such as https://ops.example.com"))?;
        let plain = matches!(url.scheme(), "http" | "https")
            && url.username().is_empty()
            && url.password().is_none()
            && url.path() == "/"
            && url.query().is_none()
            && url.fragment().is_none()
            && !text.ends_with("//");
        let (Some(host), Some(port), true) = (url.host_str(), url.port_or_known_default(), plain)
        else {
            return Err(format!(
                "`{text}` is not an origin such as https://ops.example.com (http or https, a host and an optional port; no path, query or credentials)"
            ));
        };
        Ok(Self {
            scheme: url.scheme().to_owned(),
            host: host.to_ascii_lowercase(),
            port,
        })
    }
}
