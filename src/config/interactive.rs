//! The `[interactive]` table: what keeps interactive sessions (`salloc`,
//! `srun` outside a job) from becoming the way to skip the queue: how
//! many a user may hold, with how many GPUs, for how long, and the QoS
//! they run with.

use std::time::Duration;

use toml::Spanned;

use super::error::{ConfigError, Source};
use super::raw::RawInteractive;
use super::types::{Interactive, Qos};

/// The `[interactive]` table, checked against the QoS levels.
pub(super) fn interactive(
    raw: RawInteractive,
    qos: &[Qos],
    src: &Source,
) -> Result<Interactive, ConfigError> {
    let qos_name = match raw.qos {
        None => None,
        Some(q) => Some(known_qos(q, qos, src)?),
    };
    let unwatched_after = super::pool::duration(
        raw.unwatched_after.as_ref(),
        "[interactive] unwatched_after",
        src,
    )?
    .unwrap_or(Interactive::default().unwatched_after);
    if unwatched_after < Duration::from_secs(5) {
        return Err(src.fail(
            raw.unwatched_after.as_ref().map(Spanned::span),
            "[interactive] unwatched_after",
            "must be at least 5s: salloc and srun look every 2 s".into(),
        ));
    }
    Ok(Interactive {
        max_sessions_per_user: raw.max_sessions_per_user,
        max_gpus_per_user: raw.max_gpus_per_user,
        max_time: raw.max_time.flatten(),
        default_time: raw.default_time.flatten(),
        qos: qos_name,
        unwatched_after,
    })
}

fn known_qos(name: Spanned<String>, qos: &[Qos], src: &Source) -> Result<String, ConfigError> {
    if qos.iter().any(|q| q.name == *name.get_ref()) {
        return Ok(name.into_inner());
    }
    let known: Vec<&str> = qos.iter().map(|q| q.name.as_str()).collect();
    Err(src.fail(
        Some(name.span()),
        "[interactive] qos",
        format!(
            "unknown QoS '{}' (known: {})",
            name.get_ref(),
            known.join(", ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::path::Path;

    #[test]
    fn the_table_is_read_and_a_wrong_qos_or_span_named() {
        let c = Config::parse(
            "[interactive]\nmax_sessions_per_user = 2\nmax_gpus_per_user = 4\nmax_time = \"8:00:00\"\ndefault_time = \"1:00:00\"\nqos = \"high\"\nunwatched_after = \"30s\"\n",
            Path::new("y.toml"),
        )
        .unwrap()
        .interactive;
        assert_eq!(c.max_sessions_per_user, Some(2));
        assert_eq!(c.max_gpus_per_user, Some(4));
        assert_eq!(c.max_time, Some(8 * 3600));
        assert_eq!(c.default_time, Some(3600));
        assert_eq!(c.qos.as_deref(), Some("high"));
        assert_eq!(c.unwatched_after.as_secs(), 30);
        let e = Config::parse("[interactive]\nqos = \"urgent\"\n", Path::new("y.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown QoS 'urgent'"), "{e}");
        let e = Config::parse(
            "[interactive]\nunwatched_after = \"1s\"\n",
            Path::new("y.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("at least 5s"), "{e}");
    }
}
