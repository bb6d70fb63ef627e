//! `ysshare`: the fair-share tree — shares, usage, and the factor each
//! association gets.

use clap::Parser;

use super::{ask, load_config, print, split_list, CliError, CliResult};
use crate::proto::{Query, Reply, Request, ShareRow};

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
    #[arg(long, conflicts_with_all = ["parsable", "parsable2", "noheader", "long"])]
    pub json: bool,
}

pub fn run(args: Args) -> CliResult {
    let config = load_config()?;
    let query = Query::Shares {
        accounts: split_list(&args.accounts),
        users: split_list(&args.users),
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
    if args.json {
        let json = serde_json::json!({ "shares": rows });
        return print(&format!("{}\n", serde_json::to_string_pretty(&json)?));
    }
    print(&render(
        &rows,
        args.long,
        !args.noheader,
        args.parsable || args.parsable2,
        args.parsable,
    ))
}

fn number(x: f64) -> String {
    if x.is_infinite() {
        "inf".to_string()
    } else {
        format!("{x:.6}")
    }
}

/// sshare's layout: child accounts indented one space per level.
pub fn render(
    rows: &[ShareRow],
    long: bool,
    header: bool,
    parsable: bool,
    trailing: bool,
) -> String {
    let mut head = vec!["Account", "User", "RawShares", "NormShares", "RawUsage"];
    if long {
        head.push("NormUsage");
    }
    head.extend(["EffectvUsage", "FairShare"]);
    if long {
        head.push("LevelFS");
    }
    let budgets = rows.iter().any(|r| r.budget.is_some());
    if budgets {
        head.extend(["Budget", "BudgetLeft"]);
    }
    let mut table: Vec<Vec<String>> = Vec::new();
    for r in rows {
        let indent = if parsable {
            String::new()
        } else {
            " ".repeat(r.depth.saturating_sub(1))
        };
        let mut cells = vec![
            format!("{indent}{}", r.account),
            r.user.clone().unwrap_or_default(),
            format!("{}", r.raw_shares),
            number(r.norm_shares),
            r.raw_usage.to_string(),
        ];
        if long {
            cells.push(number(r.norm_usage));
        }
        cells.push(number(r.effective_usage));
        cells.push(if r.user.is_some() {
            number(r.fairshare)
        } else {
            String::new()
        });
        if long {
            cells.push(number(r.level_fs.unwrap_or(f64::INFINITY)));
        }
        if budgets {
            let tokens = |t: Option<f64>| t.map(|t| format!("{t:.1}")).unwrap_or_default();
            cells.push(tokens(r.budget));
            cells.push(tokens(r.budget_left));
        }
        table.push(cells);
    }
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
            table
                .iter()
                .map(|r| r[i].len())
                .max()
                .unwrap_or(0)
                .max(if header { head[i].len() } else { 0 })
        })
        .collect();
    let line = |cells: &[String]| -> String {
        let text: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i < 2 {
                    format!("{c:<w$}", w = widths[i])
                } else {
                    format!("{c:>w$}", w = widths[i])
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
