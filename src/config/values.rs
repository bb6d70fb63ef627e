//! Values that are programs or addresses: `notify_command`, and the
//! addresses ysctld listens on.

/// A command or address value that does not read as one.
#[derive(Debug, thiserror::Error, PartialEq)]
pub(super) enum ValueError {
    #[error("notify_command = '{0}' has an unclosed quote")]
    UnclosedQuote(String),
    #[error("notify_command is empty; leave it out for no notifications")]
    EmptyCommand,
    #[error("notify_command: '{0}' is not an absolute path (ysctld runs it without a shell or PATH search)")]
    RelativeProgram(String),
    #[error("{key} = '{text}' is not an address and port such as 127.0.0.1:9464 or [::1]:9464 (or a port alone, on 127.0.0.1)")]
    Listen { key: &'static str, text: String },
}

/// `notify_command`: a program with arguments, split as a shell would
/// (quotes, no expansion); the program an absolute path.
pub(super) fn parse_command(text: &str) -> Result<Vec<String>, ValueError> {
    let words = shlex::split(text).ok_or_else(|| ValueError::UnclosedQuote(text.to_string()))?;
    match words.first() {
        None => Err(ValueError::EmptyCommand),
        Some(program) if !program.starts_with('/') => {
            Err(ValueError::RelativeProgram(program.clone()))
        }
        Some(_) => Ok(words),
    }
}

/// A listening address (`key` names it): `ADDRESS:PORT`, or a bare port
/// on 127.0.0.1.
pub(super) fn parse_listen(
    key: &'static str,
    text: &str,
) -> Result<std::net::SocketAddr, ValueError> {
    let text = text.trim();
    if let Ok(port) = text.parse::<u16>() {
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse().map_err(|_| ValueError::Listen {
        key,
        text: text.to_string(),
    })
}
