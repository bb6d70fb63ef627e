//! `ysshare`: the fair-share tree — shares, usage, and the factor each
//! association gets.

use clap::Parser;

use super::{ask, load_config, print, split_list, CliError, CliResult};
use crate::proto::{Query, Reply, Request, ShareRow};
use crate::report::FormatError;

#[derive(Parser, Debug)]
#[command(
    name = "ysshare",
    version,
    about = "Show accounts' and users' shares, usage and fair-share factor",
    long_about = "Show the fair-share tree: each account and user association with its shares, its \
                  usage (raw, and decayed with the configured half-life) and its fair-share factor, \
                  the number the scheduler weighs. Users see the accounts above their own associations; \
                  with -a also the other users of their accounts. Root and admins see everything.",
    after_help = "Columns: RawShares (as configured), NormShares (fraction of the machine), RawUsage \
                  (billing-seconds ever charged: GPU-seconds x billing weight), EffectvUsage (decayed \
                  usage as a fraction of all, classic's effective usage), FairShare (the factor, 0..1). \
                  With -l also NormUsage and LevelFS (Fair Tree's shares/usage among siblings; inf \
                  without usage). Where accounts have budgets: Budget and BudgetLeft, in tokens \
                  (billing-hours) for the current period."
)]
pub struct Args {
    /// Only these accounts
    #[arg(short = 'A', long = "accounts", value_name = "ACCOUNT[,ACCOUNT]")]
    pub accounts: Vec<String>,
    /// Only these users
    #[arg(short = 'u', long = "users", value_name = "USER[,USER]")]
    pub users: Vec<String>,
    /// All users of the accounts shown, not only you
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Also normalized usage and level fair-share
    #[arg(short = 'l', long)]
    pub long: bool,
    /// Leave out the header
    #[arg(short = 'n', long)]
    pub noheader: bool,
    /// Fields separated by '|', with a trailing '|'
    #[arg(short = 'p', long)]
    pub parsable: bool,
    /// Fields separated by '|', without a trailing '|'
    #[arg(short = 'P', long)]
    pub parsable2: bool,
    /// Print the rows as JSON
    #[arg(long, conflicts_with_all = ["parsable", "parsable2", "noheader", "long", "format"])]
    pub json: bool,
    /// Only your own user associations, no account rows (with -u: those users')
    #[arg(short = 'U', long = "Users")]
    pub users_only: bool,
    /// Columns to show, each with an optional %WIDTH: Account, User, RawShares, NormShares, RawUsage, NormUsage, EffectvUsage, FairShare, LevelFS, Budget, BudgetLeft
    #[arg(short = 'o', long, value_name = "FIELDS")]
    pub format: Option<String>,
    #[command(flatten)]
    pub clusters: super::Clusters,
}

/// One `--format` column: a field's name as sshare writes it, and a width.
#[derive(Clone, Debug, PartialEq)]
pub struct ShareColumn {
    pub name: &'static str,
    pub width: Option<usize>,
}

const SHARE_FIELDS: [&str; 11] = [
    "Account",
    "User",
    "RawShares",
    "NormShares",
    "RawUsage",
    "NormUsage",
    "EffectvUsage",
    "FairShare",
    "LevelFS",
    "Budget",
    "BudgetLeft",
];

/// Parses `--format`: names in any case, each with an optional `%WIDTH`
/// (`%-WIDTH` too, as Slurm writes it).
pub fn parse_share_format(text: &str) -> Result<Vec<ShareColumn>, FormatError> {
    let mut columns = Vec::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, width) = crate::report::split_width(item)?;
        let name = SHARE_FIELDS
            .iter()
            .find(|f| f.eq_ignore_ascii_case(name))
            .ok_or_else(|| FormatError::UnknownField {
                name: name.to_string(),
                known: SHARE_FIELDS.join(", "),
            })?;
        columns.push(ShareColumn { name, width });
    }
    if columns.is_empty() {
        return Err(FormatError::Empty);
    }
    Ok(columns)
}

pub fn run(args: Args) -> CliResult {
    let config = load_config()?;
    let format = args
        .format
        .as_deref()
        .map(parse_share_format)
        .transpose()
        .map_err(|e| CliError::usage(e.to_string()))?;
    let mut users = split_list(&args.users);
    if args.users_only && users.is_empty() {
        users.push(super::current_user_name());
    }
    let query = Query::Shares {
        accounts: split_list(&args.accounts),
        users: users.clone(),
        all_users: args.all,
    };
    let rows = match ask(&config, Request::Query(query))? {
        Reply::Shares { rows } => rows,
        Reply::Rejected { error } => return Err(CliError::failed(error)),
        other => {
            return Err(CliError::failed(format!(
                "unexpected reply from ysctld: {other:?}"
            )))
        }
    };
    let rows: Vec<ShareRow> = if args.users_only {
        users_only(rows, &users, &config)
    } else {
        rows
    };
    if args.json {
        let json = serde_json::json!({ "shares": rows });
        return print(&format!("{}\n", serde_json::to_string_pretty(&json)?));
    }
    let layout = Layout {
        header: !args.noheader,
        parsable: args.parsable || args.parsable2,
        trailing: args.parsable,
    };
    let columns = format.unwrap_or_else(|| default_columns(&rows, args.long));
    print(&render(&rows, &columns, layout))
}

/// `-U`: the users' associations alone. One a user has through an
/// account open to them (`users = ["*"]`, or no accounts configured) shows
/// before their first job too: no usage yet, so the full factor.
fn users_only(
    rows: Vec<ShareRow>,
    users: &[String],
    config: &crate::config::Config,
) -> Vec<ShareRow> {
    let mut out: Vec<ShareRow> = rows
        .iter()
        .filter(|r| r.user.as_ref().is_some_and(|u| users.contains(u)))
        .cloned()
        .collect();
    for user in users {
        for account in config.accounts_for(user) {
            let known = out
                .iter()
                .any(|r| r.account == account && r.user.as_deref() == Some(user));
            let Some(parent) = rows
                .iter()
                .find(|r| r.account == account && r.user.is_none())
            else {
                continue;
            };
            if !known {
                out.push(ShareRow {
                    user: Some(user.clone()),
                    depth: parent.depth + 1,
                    raw_shares: 1.0,
                    raw_usage: 0,
                    usage: 0.0,
                    norm_usage: 0.0,
                    effective_usage: 0.0,
                    level_fs: None,
                    fairshare: 1.0,
                    budget: None,
                    budget_left: None,
                    ..parent.clone()
                });
            }
        }
    }
    out
}

/// How rows are laid out.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub header: bool,
    /// '|'-separated, and with a trailing '|'.
    pub parsable: bool,
    pub trailing: bool,
}

/// sshare's columns: with `long`, NormUsage and LevelFS too; budgets
/// where an account has one.
pub fn default_columns(rows: &[ShareRow], long: bool) -> Vec<ShareColumn> {
    let budgets = rows.iter().any(|r| r.budget.is_some());
    SHARE_FIELDS
        .iter()
        .filter(|f| long || !matches!(**f, "NormUsage" | "LevelFS"))
        .filter(|f| budgets || !matches!(**f, "Budget" | "BudgetLeft"))
        .map(|name| ShareColumn { name, width: None })
        .collect()
}

fn number(x: f64) -> String {
    if x.is_infinite() {
        "inf".to_string()
    } else {
        format!("{x:.6}")
    }
}

/// The text of one field of a row.
fn cell(r: &ShareRow, field: &str, indent: &str) -> String {
    let tokens = |t: Option<f64>| t.map(|t| format!("{t:.1}")).unwrap_or_default();
    match field {
        "Account" => format!("{indent}{}", r.account),
        "User" => r.user.clone().unwrap_or_default(),
        "RawShares" => format!("{}", r.raw_shares),
        "NormShares" => number(r.norm_shares),
        "RawUsage" => r.raw_usage.to_string(),
        "NormUsage" => number(r.norm_usage),
        "EffectvUsage" => number(r.effective_usage),
        "FairShare" if r.user.is_some() => number(r.fairshare),
        "LevelFS" => number(r.level_fs.unwrap_or(f64::INFINITY)),
        "Budget" => tokens(r.budget),
        "BudgetLeft" => tokens(r.budget_left),
        _ => String::new(),
    }
}

/// sshare's layout: child accounts indented one space per level.
pub fn render(rows: &[ShareRow], columns: &[ShareColumn], layout: Layout) -> String {
    let Layout {
        header,
        parsable,
        trailing,
    } = layout;
    let head: Vec<&str> = columns.iter().map(|c| c.name).collect();
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let indent = if parsable {
                String::new()
            } else {
                " ".repeat(r.depth.saturating_sub(1))
            };
            columns.iter().map(|c| cell(r, c.name, &indent)).collect()
        })
        .collect();
    let mut out = String::new();
    if parsable {
        let end = if trailing { "|" } else { "" };
        if header {
            out.push_str(&format!("{}{end}\n", head.join("|")));
        }
        for row in table {
            out.push_str(&format!("{}{end}\n", row.join("|")));
        }
        return out;
    }
    let widths: Vec<usize> = (0..head.len())
        .map(|i| {
            columns[i].width.unwrap_or_else(|| {
                table
                    .iter()
                    .map(|r| r[i].len())
                    .max()
                    .unwrap_or(0)
                    .max(if header { head[i].len() } else { 0 })
            })
        })
        .collect();
    let line = |cells: &[String]| -> String {
        let text: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let w = widths[i];
                let c: String = c.chars().take(w).collect();
                if matches!(columns[i].name, "Account" | "User") {
                    format!("{c:<w$}")
                } else {
                    format!("{c:>w$}")
                }
            })
            .collect();
        text.join(" ").trim_end().to_string() + "\n"
    };
    if header {
        out.push_str(&line(
            &head.iter().map(|h| h.to_string()).collect::<Vec<_>>(),
        ));
        out.push_str(&line(
            &widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>(),
        ));
    }
    for row in &table {
        out.push_str(&line(row));
    }
    out
}
