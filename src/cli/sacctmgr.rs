//! `sacctmgr` over ysched, read-only: the users, accounts, associations
//! and QoS that Slurm clients look up (`sacctmgr -n -s list user NAME
//! format=account%256`), read from the config, where ysched keeps them.
//! Changes are made in ysched.toml, so `add`, `modify` and `delete` are
//! refused with that said.

use super::{load_config, print, CliError, CliResult};
use crate::config::Config;

/// What is listed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entity {
    User,
    Account,
    Association,
    Qos,
    Cluster,
}

impl Entity {
    fn parse(word: &str) -> Option<Entity> {
        Some(match word.to_ascii_lowercase().as_str() {
            "user" | "users" => Entity::User,
            "account" | "accounts" => Entity::Account,
            "association" | "associations" | "assoc" => Entity::Association,
            "qos" => Entity::Qos,
            "cluster" | "clusters" => Entity::Cluster,
            _ => return None,
        })
    }

    /// The columns Slurm shows when no format= is given.
    fn default_format(self, with_assoc: bool) -> &'static str {
        match (self, with_assoc) {
            (Entity::User, false) => "User,DefaultAccount,AdminLevel",
            (Entity::User, true) => "User,DefaultAccount,AdminLevel,Cluster,Account,Share,QOS",
            (Entity::Account, false) => "Account,Descr,Org",
            (Entity::Account, true) => "Account,Descr,Org,Cluster,ParentName,User,Share,QOS",
            (Entity::Association, _) => "Cluster,Account,User,Share,QOS,DefaultQOS",
            (Entity::Qos, _) => "Name,Priority,GraceTime,Preempt,PreemptMode,UsageFactor,MaxWall",
            (Entity::Cluster, _) => "Cluster,ControlHost",
        }
    }
}

/// One row: field name (lower case) → value.
type Row = Vec<(&'static str, String)>;

/// The command line, as sacctmgr reads it.
#[derive(Debug, Default)]
struct Request {
    noheader: bool,
    with_assoc: bool,
    parsable: Option<bool>,
    entity: Option<Entity>,
    names: Vec<String>,
    users: Vec<String>,
    accounts: Vec<String>,
    format: Option<String>,
}

fn parse(args: &[String]) -> Result<Request, CliError> {
    let mut r = Request::default();
    let mut verb = None;
    for w in args {
        match w.as_str() {
            "-n" | "--noheader" => r.noheader = true,
            "-s" | "--associations" => r.with_assoc = true,
            "-p" | "--parsable" => r.parsable = Some(true),
            "-P" | "--parsable2" => r.parsable = Some(false),
            "-i" | "--immediate" | "-Q" | "--quiet" | "-v" | "--verbose" | "-r" | "--readonly" => {}
            "-h" | "--help" => {
                return Err(CliError::usage(
                    "usage: sacctmgr [-n] [-s] [-p|-P] list user|account|association|qos|cluster [NAME...] [where KEY=VALUE...] [format=FIELD[%WIDTH],...]",
                ))
            }
            _ if w.starts_with('-') => {
                return Err(CliError::usage(format!("unknown option {w}")))
            }
            _ if verb.is_none() => verb = Some(w.to_ascii_lowercase()),
            _ if r.entity.is_none() => {
                r.entity = Some(Entity::parse(w).ok_or_else(|| {
                    CliError::usage(format!(
                        "unknown entity '{w}' (ysched lists user, account, association, qos, cluster)"
                    ))
                })?)
            }
            _ => take_word(&mut r, w)?,
        }
    }
    match verb.as_deref() {
        Some("list" | "show" | "ls") => {}
        Some("add" | "create" | "modify" | "update" | "delete" | "remove" | "load" | "dump") => {
            return Err(CliError::failed(
                "ysched's users, accounts and QoS are set in ysched.toml (then `yscontrol reload`); sacctmgr here only lists them",
            ))
        }
        Some(other) => return Err(CliError::usage(format!("unknown command '{other}'"))),
        None => return Err(CliError::usage("no command (e.g. sacctmgr list user)")),
    }
    if r.entity.is_none() {
        return Err(CliError::usage(
            "list what? user, account, association, qos or cluster",
        ));
    }
    Ok(r)
}

/// `NAME`, `where`, `KEY=VALUE`, `withassoc` after the entity.
fn take_word(r: &mut Request, word: &str) -> Result<(), CliError> {
    let list = |v: &str| -> Vec<String> {
        v.split(',')
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    };
    let Some((key, value)) = word.split_once('=') else {
        match word.to_ascii_lowercase().as_str() {
            "where" | "set" => {}
            "withassoc" | "withasso" => r.with_assoc = true,
            _ => r.names.extend(list(word)),
        }
        return Ok(());
    };
    match key.to_ascii_lowercase().as_str() {
        "format" => r.format = Some(value.to_string()),
        "name" | "names" => r.names.extend(list(value)),
        "user" | "users" => r.users.extend(list(value)),
        "account" | "accounts" | "acct" | "accts" => r.accounts.extend(list(value)),
        "cluster" | "clusters" | "partition" | "partitions" => {}
        other => {
            return Err(CliError::usage(format!(
                "unknown key '{other}' (ysched knows name, user, account, cluster, format)"
            )))
        }
    }
    Ok(())
}

pub fn run(args: Vec<String>) -> CliResult {
    if args.iter().any(|a| a == "-V" || a == "--version") {
        return super::print(crate::slurm_options::VERSION);
    }
    let request = parse(&args)?;
    let config = load_config()?;
    let entity = request.entity.expect("checked by parse");
    let rows = rows(&config, entity, &request);
    let format = request
        .format
        .clone()
        .unwrap_or_else(|| entity.default_format(request.with_assoc).to_string());
    let columns = parse_format(&format)?;
    print(&render(&rows, &columns, &request))
}

/// The users named in the config: in accounts (but `*`), and admins.
fn users_of(config: &Config) -> Vec<String> {
    let mut users: Vec<String> = Vec::new();
    let named = config.accounts.iter().flat_map(|a| a.users.iter());
    for u in named.chain(config.admins.iter()) {
        if u != "*" && !users.contains(u) {
            users.push(u.clone());
        }
    }
    users
}

fn wanted(filter: &[String], value: &str) -> bool {
    filter.is_empty() || filter.iter().any(|f| f.eq_ignore_ascii_case(value))
}

fn rows(config: &Config, entity: Entity, r: &Request) -> Vec<Row> {
    let cluster = config.node_name.clone();
    match entity {
        Entity::User => user_rows(config, r),
        Entity::Account | Entity::Association => account_rows(config, entity, r),
        Entity::Qos => qos_rows(config, r),
        Entity::Cluster => vec![vec![("cluster", cluster.clone()), ("controlhost", cluster)]],
    }
}

/// One association's row, as Slurm holds what `ysctld export-slurm`
/// loads: an account's shares (whole) and GPU limit with every QoS; a
/// user's share of 1 in the account, per-user GPU limit, the QoS the user
/// may use there and the default one; the user's default account and
/// admin level. Lists of QoS are sorted, as Slurm prints them.
fn assoc(config: &Config, account: &str, user: &str) -> Row {
    use crate::report::slurm_conf::{qos_of_user, slurm_shares};
    let record = config.accounts.iter().find(|a| a.name == account);
    let admin = config.admins.iter().any(|a| a == user) || user == "root";
    let (share, qos, default_qos, gpus) = if user.is_empty() || account == "root" {
        let mut all: Vec<String> = config.qos.iter().map(|q| q.name.clone()).collect();
        all.sort();
        let shares = record.map_or(1.0, |a| slurm_shares(a.shares));
        let default = (account == "root" && !user.is_empty()).then(String::new);
        (shares, all, default, record.and_then(|a| a.limits.max_gpus))
    } else {
        let mut allowed = qos_of_user(config, account, user);
        allowed.sort();
        let per_user = record.and_then(|a| a.limits.max_gpus_per_user);
        (1.0, allowed, Some(config.default_qos.clone()), per_user)
    };
    vec![
        ("cluster", config.node_name.clone()),
        ("account", account.to_string()),
        ("user", user.to_string()),
        ("share", format!("{share}")),
        (
            "grptres",
            gpus.map(|g| format!("gres/gpu={g}")).unwrap_or_default(),
        ),
        ("qos", qos.join(",")),
        ("defaultqos", default_qos.unwrap_or_default()),
        (
            "defaultaccount",
            // An administrator of no account is in Slurm's root one.
            match config.accounts_for(user).first() {
                Some(a) => a.to_string(),
                None if admin => "root".to_string(),
                None => String::new(),
            },
        ),
        (
            "adminlevel",
            if admin { "Administrator" } else { "None" }.to_string(),
        ),
    ]
}

/// `sacctmgr show user`.
fn user_rows(config: &Config, r: &Request) -> Vec<Row> {
    let mut names = r.names.clone();
    names.extend(r.users.iter().cloned());
    let mut users = users_of(config);
    // A named user with no account of their own may still use
    // one open to everyone (or the default account).
    for n in &names {
        if !users.contains(n) && !config.accounts_for(n).is_empty() {
            users.push(n.clone());
        }
    }
    let mut out = Vec::new();
    for user in users.iter().filter(|u| wanted(&names, u)) {
        let accounts: Vec<&str> = config
            .accounts_for(user)
            .into_iter()
            .filter(|a| wanted(&r.accounts, a))
            .collect();
        if r.with_assoc {
            out.extend(accounts.iter().map(|a| assoc(config, a, user)));
        } else if !accounts.is_empty() || r.accounts.is_empty() {
            out.push(assoc(config, accounts.first().copied().unwrap_or(""), user));
        }
    }
    out
}

/// `sacctmgr show account` / `association`.
fn account_rows(config: &Config, entity: Entity, r: &Request) -> Vec<Row> {
    let mut names = r.names.clone();
    names.extend(r.accounts.iter().cloned());
    let accounts: Vec<(String, Option<String>, Vec<String>)> = if config.accounts.is_empty() {
        vec![(
            crate::config::DEFAULT_ACCOUNT.to_string(),
            None,
            vec!["*".into()],
        )]
    } else {
        config
            .accounts
            .iter()
            .map(|a| (a.name.clone(), a.parent.clone(), a.users.clone()))
            .collect()
    };
    let mut out = Vec::new();
    if entity == Entity::Association && names.is_empty() && wanted(&r.users, "root") {
        // Slurm's root account, with root and the administrators in it
        // (as the export loads them), heads every listing.
        out.push(assoc(config, "root", ""));
        out.push(assoc(config, "root", "root"));
        for admin in config.admins.iter().filter(|a| *a != "root" && *a != "*") {
            out.push(assoc(config, "root", admin));
        }
    }
    for (name, parent, users) in accounts.iter().filter(|(n, ..)| wanted(&names, n)) {
        let described = |mut row: Row| {
            row.push(("descr", name.clone()));
            row.push(("org", name.clone()));
            row.push((
                "parentname",
                parent.clone().unwrap_or_else(|| "root".into()),
            ));
            row
        };
        let row = described(assoc(config, name, ""));
        if entity == Entity::Account && !r.with_assoc {
            out.push(row);
            continue;
        }
        if r.users.is_empty() {
            out.push(row.clone());
        }
        for user in users.iter().filter(|u| *u != "*" && wanted(&r.users, u)) {
            out.push(described(assoc(config, name, user)));
        }
    }
    out
}

/// `sacctmgr show qos`.
fn qos_rows(config: &Config, r: &Request) -> Vec<Row> {
    config
        .qos
        .iter()
        .filter(|q| wanted(&r.names, &q.name))
        .map(|q| {
            vec![
                ("name", q.name.clone()),
                ("priority", q.priority.to_string()),
                ("gracetime", slurm_duration(q.grace_time)),
                ("preempt", {
                    let mut preempt = q.preempt.clone();
                    preempt.sort();
                    preempt.join(",")
                }),
                (
                    "preemptmode",
                    format!("{:?}", q.preempt_mode).to_ascii_lowercase(),
                ),
                ("usagefactor", format!("{:.6}", q.usage_factor)),
                (
                    "maxwall",
                    q.max_time.map(slurm_duration).unwrap_or_default(),
                ),
            ]
        })
        .collect()
}

/// A duration as sacctmgr prints one: `HH:MM:SS`, with `D-` before it
/// from a day on.
fn slurm_duration(secs: u64) -> String {
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let hms = format!(
        "{:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    );
    if days > 0 {
        format!("{days}-{hms}")
    } else {
        hms
    }
}

/// `format=Field[%WIDTH],...`: (key, header, width); widths as Slurm's
/// (10 unless given; `%-N` too).
fn parse_format(text: &str) -> Result<Vec<(String, String, usize)>, CliError> {
    const HEADERS: [(&str, &str); 17] = [
        ("grptres", "GrpTRES"),
        ("user", "User"),
        ("defaultaccount", "Def Acct"),
        ("adminlevel", "Admin"),
        ("cluster", "Cluster"),
        ("account", "Account"),
        ("share", "Share"),
        ("qos", "QOS"),
        ("defaultqos", "Def QOS"),
        ("descr", "Descr"),
        ("org", "Org"),
        ("parentname", "Par Name"),
        ("name", "Name"),
        ("priority", "Priority"),
        ("gracetime", "GraceTime"),
        ("preempt", "Preempt"),
        ("preemptmode", "PreemptMode"),
    ];
    const MORE: [(&str, &str); 3] = [
        ("usagefactor", "UsageFactor"),
        ("maxwall", "MaxWall"),
        ("controlhost", "ControlHost"),
    ];
    let mut columns = Vec::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, width) =
            crate::report::split_width(item).map_err(|e| CliError::usage(e.to_string()))?;
        let key = name.to_ascii_lowercase();
        let key = match key.as_str() {
            "defacct" | "defaultacct" => "defaultaccount".to_string(),
            "admin" => "adminlevel".to_string(),
            "parent" => "parentname".to_string(),
            "description" => "descr".to_string(),
            "fairshare" | "shares" => "share".to_string(),
            _ => key,
        };
        let header = HEADERS
            .iter()
            .chain(MORE.iter())
            .find(|(k, _)| *k == key)
            .map(|(_, h)| h.to_string())
            .ok_or_else(|| CliError::usage(format!("unknown field '{name}'")))?;
        columns.push((key, header, width.unwrap_or(10)));
    }
    if columns.is_empty() {
        return Err(CliError::usage("empty format="));
    }
    Ok(columns)
}

/// Slurm's layout: right-aligned in their widths, cut with '+'; or
/// '|'-separated.
fn render(rows: &[Row], columns: &[(String, String, usize)], r: &Request) -> String {
    let value = |row: &Row, key: &str| {
        row.iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let fit = |text: &str, width: usize| {
        if text.chars().count() > width {
            let cut: String = text.chars().take(width - 1).collect();
            format!("{cut}+")
        } else {
            format!("{text:>width$}")
        }
    };
    let mut out = String::new();
    let mut line = |cells: Vec<String>| {
        match r.parsable {
            Some(trailing) => {
                out.push_str(&cells.join("|"));
                if trailing {
                    out.push('|');
                }
            }
            None => {
                let fitted: Vec<String> = cells
                    .iter()
                    .zip(columns)
                    .map(|(c, (_, _, w))| fit(c, *w))
                    .collect();
                out.push_str(&fitted.join(" "));
                out.push(' ');
            }
        }
        out.push('\n');
    };
    if !r.noheader {
        line(columns.iter().map(|(_, h, _)| h.clone()).collect());
        if r.parsable.is_none() {
            line(columns.iter().map(|(_, _, w)| "-".repeat(*w)).collect());
        }
    }
    for row in rows {
        line(columns.iter().map(|(k, _, _)| value(row, k)).collect());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::parse(
            "admins = [\"ops\"]\n[[accounts]]\nname = \"vision\"\nusers = [\"alice\", \"bob\"]\nshares = 2\n[[accounts]]\nname = \"nlp\"\nusers = [\"bob\"]\n",
            std::path::Path::new("/etc/ysched/ysched.toml"),
        )
        .unwrap()
    }

    fn listing(args: &str) -> String {
        let words: Vec<String> = args.split_whitespace().map(String::from).collect();
        let request = parse(&words).unwrap();
        let config = config();
        let entity = request.entity.unwrap();
        let format = request
            .format
            .clone()
            .unwrap_or_else(|| entity.default_format(request.with_assoc).into());
        render(
            &rows(&config, entity, &request),
            &parse_format(&format).unwrap(),
            &request,
        )
    }

    #[test]
    fn a_users_accounts_as_snakemake_asks_for_them() {
        let out = listing("-n -s list user bob format=account%256");
        let accounts: Vec<&str> = out.lines().map(str::trim).collect();
        assert_eq!(accounts, vec!["vision", "nlp"]);
        assert!(
            out.lines().all(|l| l.len() == 257),
            "padded to 256: {out:?}"
        );
        assert_eq!(listing("-n -s list user carol format=account%256"), "");
    }

    #[test]
    fn users_accounts_and_qos_list_as_slurm_lays_them_out() {
        let out = listing("list user alice");
        assert_eq!(
            out,
            "      User   Def Acct      Admin \n---------- ---------- ---------- \n     alice     vision       None \n"
        );
        let out = listing("-P -n list account format=account,parentname");
        assert_eq!(out, "vision|root\nnlp|root\n");
        let out = listing("-p -n list qos format=name,priority");
        assert!(out.lines().any(|l| l.starts_with("critical|")), "{out}");
        assert!(out.lines().all(|l| l.ends_with('|')));
        let out = listing("-P -n list assoc where account=vision format=account,user,share");
        assert_eq!(
            out, "vision||2\nvision|alice|1\nvision|bob|1\n",
            "a user is one share among the account's users"
        );
    }

    #[test]
    fn changes_are_refused_with_where_to_make_them() {
        let e = parse(&["add".into(), "user".into(), "x".into()]).unwrap_err();
        assert!(e.message.contains("ysched.toml"), "{}", e.message);
        assert!(parse(&["list".into(), "widgets".into()]).is_err());
    }
}
