//! `ysinfo`: the server's GPUs — type, memory, topology group, state, and
//! the jobs and users holding each — with the CPUs, memory and isolation.

use clap::Parser;

use super::{load_config, print, query, CliError, CliResult};
use crate::proto::{Query, Reply};
use crate::report::node::{self, NodeInfo};

const DEFAULT_FORMAT: &str = "gpu,type,memory,group,state,jobs,users,util,reason";

#[derive(Parser, Debug)]
#[command(
    name = "ysinfo",
    version,
    disable_help_flag = true,
    about = "Show the server's GPUs and what holds them",
    long_about = "Show the server ysched schedules: each GPU with its type, memory, topology group \
                  and state (idle, allocated, shared, claimed, draining, drained), the jobs and \
                  users holding it and its utilisation at the last sample; then the CPUs and memory \
                  in use and how jobs are isolated.",
    after_help = "Fields (-o): gpu type memory group features state jobs users util reason.\n\
                  Examples:\n  ysinfo\n  ysinfo -o gpu,state,jobs -h\n  ysinfo --json"
)]
pub struct Args {
    /// Fields to show, comma-separated (see below)
    #[arg(short = 'o', long, value_name = "FIELDS")]
    pub format: Option<String>,
    /// Leave out the header and the summary lines
    #[arg(short = 'h', long)]
    pub noheader: bool,
    /// Print the server as JSON
    #[arg(long, conflicts_with_all = ["format", "noheader"])]
    pub json: bool,
    /// Print help
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
}

pub fn run(args: Args) -> CliResult {
    let config = load_config()?;
    let fields: Vec<String> = args
        .format
        .as_deref()
        .unwrap_or(DEFAULT_FORMAT)
        .split(',')
        .map(|f| f.trim().to_ascii_lowercase())
        .filter(|f| !f.is_empty())
        .collect();
    if let Some(bad) = fields.iter().find(|f| !node::FIELDS.contains(&f.as_str())) {
        return Err(CliError::usage(format!(
            "unknown field '{bad}' (fields: {})",
            node::FIELDS.join(", ")
        )));
    }
    let info = node_info(&config)?;
    if args.json {
        return print(&format!("{}\n", serde_json::to_string_pretty(&info)?));
    }
    print(&render(&info, &fields, !args.noheader))
}

/// The server as ysctld has it now.
pub fn node_info(config: &crate::config::Config) -> Result<NodeInfo, CliError> {
    match query("ysinfo", config, Query::Node)? {
        Reply::Node { node } => Ok(*node),
        other => Err(CliError::failed(format!(
            "unexpected reply from ysctld: {other:?}"
        ))),
    }
}

fn render(info: &NodeInfo, fields: &[String], header: bool) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    if header {
        rows.push(fields.iter().map(|f| f.to_ascii_uppercase()).collect());
    }
    rows.extend(
        info.gpus
            .iter()
            .map(|g| fields.iter().map(|f| node::cell(g, f)).collect()),
    );
    let widths: Vec<usize> = (0..fields.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, v)| format!("{v:<w$}", w = widths[c]))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    if header {
        let mem = crate::model::units::format_memory_mb;
        out.push_str(&format!(
            "\nnode {}: {} GPUs ({}), CPUs {}/{} allocated, memory {}/{} allocated\nisolation: {}\n",
            info.name,
            info.gpus.len(),
            info.gpu_source,
            info.cpus_allocated,
            info.cpus,
            mem(info.memory_allocated_mb),
            mem(info.memory_mb),
            info.isolation
        ));
    }
    out
}
