//! The `[containers]` table: the OCI runtime and image store jobs'
//! containers use, the mounts every container gets, and the registries
//! images may be pulled from.

use std::path::PathBuf;

use toml::Spanned;

use super::error::{ConfigError, Source};
use super::raw::RawContainers;
use super::types::Containers;
use crate::model::container::{parse_mounts, ContainerMount, ContainerRequest, ImageSource};

/// The `[containers]` table, checked.
pub(super) fn containers(raw: RawContainers, src: &Source) -> Result<Containers, ConfigError> {
    let defaults = Containers::default();
    let absolute = |value: Option<Spanned<PathBuf>>, key: &str| match value {
        None => Ok(None),
        Some(p) if p.get_ref().is_absolute() => Ok(Some(p.into_inner())),
        Some(p) => Err(src.fail(
            Some(p.span()),
            &format!("[containers] {key}"),
            format!("'{}' is not an absolute path", p.get_ref().display()),
        )),
    };
    let mut mounts = Vec::new();
    for m in &raw.mounts {
        mounts.extend(site_mounts(m, src)?);
    }
    let allowed_registries = raw
        .allowed_registries
        .unwrap_or_default()
        .into_iter()
        .map(|r| registry(r, src, "allowed_registries"))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Containers {
        runtime: absolute(raw.runtime, "runtime")?.unwrap_or(defaults.runtime),
        podman: absolute(raw.podman, "podman")?.unwrap_or(defaults.podman),
        storage: absolute(raw.storage, "storage")?,
        mounts,
        allowed_registries,
        allow_root: raw.allow_root.unwrap_or(false),
        cache_size_mb: raw.cache_size,
        max_archive_mb: raw.max_archive_size.unwrap_or(defaults.max_archive_mb),
        pull_timeout: super::pool::duration(
            raw.pull_timeout.as_ref(),
            "[containers] pull_timeout",
            src,
        )?
        .unwrap_or(defaults.pull_timeout),
        cdi_dirs: match raw.cdi_dirs {
            None => defaults.cdi_dirs,
            Some(dirs) => dirs
                .into_iter()
                .map(|d| absolute(Some(d), "cdi_dirs").map(Option::unwrap_or_default))
                .collect::<Result<_, _>>()?,
        },
        insecure_registries: raw
            .insecure_registries
            .into_iter()
            .map(|r| registry(r, src, "insecure_registries"))
            .collect::<Result<_, _>>()?,
        prefetch: raw
            .prefetch
            .iter()
            .map(|r| prefetched(r, src))
            .collect::<Result<_, _>>()?,
    })
}

/// An image to keep warm: a name in a registry (an archive has nothing
/// to pull).
fn prefetched(r: &Spanned<String>, src: &Source) -> Result<String, ConfigError> {
    let fail = |message: String| src.fail(Some(r.span()), "[containers] prefetch", message);
    let request = ContainerRequest::new(r.get_ref())
        .map_err(|e| fail(e.to_string().replacen("--container-image: ", "", 1)))?;
    match request.source() {
        ImageSource::Reference(reference) => Ok(reference),
        ImageSource::Archive(path) => Err(fail(format!(
            "'{path}' is an archive; prefetch names images in a registry, such as nvcr.io/nvidia/pytorch:24.01-py3"
        ))),
    }
}

fn site_mounts(m: &Spanned<String>, src: &Source) -> Result<Vec<ContainerMount>, ConfigError> {
    parse_mounts(m.get_ref()).map_err(|e| {
        let message = e.to_string().replacen("--container-mounts: ", "", 1);
        src.fail(Some(m.span()), "[containers] mounts", message)
    })
}

/// A registry's host (`nvcr.io`, `registry.lab:5000`) or `*` for any.
fn registry(r: Spanned<String>, src: &Source, key: &str) -> Result<String, ConfigError> {
    let name = r.get_ref().trim();
    let ok = name == "*"
        || (!name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-:_".contains(&b)));
    if !ok {
        return Err(src.fail(
            Some(r.span()),
            &format!("[containers] {key}"),
            format!("'{name}' is not a registry host such as nvcr.io or registry.lab:5000 (or * for any)"),
        ));
    }
    Ok(name.to_string())
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::path::Path;

    #[test]
    fn defaults_and_errors_that_name_the_line() {
        let c = Config::parse("", Path::new("y.toml")).unwrap().containers;
        assert_eq!(c.runtime, Path::new("/usr/bin/crun"));
        // No registry unless the admin lists it.
        assert!(!c.may_pull_from("nvcr.io"));
        let any = Config::parse(
            "[containers]\nallowed_registries = [\"*\"]\n",
            Path::new("y.toml"),
        )
        .unwrap()
        .containers;
        assert!(any.may_pull_from("nvcr.io"));
        let c = Config::parse(
            "[containers]\nmounts = [\"/datasets:/datasets:ro\", \"/outputs\"]\nallowed_registries = [\"nvcr.io\"]\nstorage = \"/var/lib/ysched/images\"\n",
            Path::new("y.toml"),
        )
        .unwrap()
        .containers;
        assert_eq!(c.mounts.len(), 2);
        assert!(c.mounts[0].read_only);
        assert!(c.may_pull_from("nvcr.io"));
        assert!(!c.may_pull_from("docker.io"));
        let e = Config::parse(
            "[containers]\nmounts = [\"/a:/b:rx\"]\n",
            Path::new("y.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("line 2") && e.contains("'rx' in '/a:/b:rx' is not one of ro, rw"),
            "{e}"
        );
        let e = Config::parse("[containers]\nruntime = \"crun\"\n", Path::new("y.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("'crun' is not an absolute path"), "{e}");
        let e = Config::parse(
            "[containers]\nallowed_registries = [\"a b\"]\n",
            Path::new("y.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("not a registry host"), "{e}");
        let c = Config::parse(
            "[containers]\nprefetch = [\"nvcr.io/nvidia/pytorch:24.01-py3\"]\n",
            Path::new("y.toml"),
        )
        .unwrap()
        .containers;
        assert_eq!(
            c.prefetch,
            vec!["nvcr.io/nvidia/pytorch:24.01-py3".to_string()]
        );
        let c = Config::parse(
            "[containers]\npull_timeout = \"2m\"\ncache_size = \"1G\"\ncdi_dirs = [\"/etc/cdi\"]\n",
            Path::new("y.toml"),
        )
        .unwrap()
        .containers;
        assert_eq!(c.pull_timeout, std::time::Duration::from_secs(120));
        assert_eq!(c.cache_size_mb, Some(1024));
        assert_eq!(c.cdi_dirs, vec![std::path::PathBuf::from("/etc/cdi")]);
        for (text, why) in [
            ("pull_timeout = \"soon\"", "'soon' is not a duration"),
            ("cdi_dirs = [\"cdi\"]", "'cdi' is not an absolute path"),
            ("insecure_registries = [\"a b\"]", "not a registry host"),
        ] {
            let e = Config::parse(&format!("[containers]\n{text}\n"), Path::new("y.toml"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("line 2") && e.contains(why), "{e}");
        }
        for (bad, why) in [("a;b", "has a character"), ("/data/y.tar", "is an archive")] {
            let text = format!("[containers]\nprefetch = [\"{bad}\"]\n");
            let e = Config::parse(&text, Path::new("y.toml"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("line 2") && e.contains(why), "{e}");
        }
    }
}
