//! `ysinfo`: the nodes' GPUs — type, memory, topology group, state, and
//! the jobs and users holding each — with each node's CPUs, memory and
//! isolation; `ysinfo -N`, one line per node with its state.

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
    about = "Show the nodes' GPUs and what holds them",
    long_about = "Show the servers ysched schedules: each GPU with its type, memory, topology group \
                  and state (idle, allocated, shared, claimed, draining, drained), the jobs and \
                  users holding it and its utilisation at the last sample; then each node's CPUs \
                  and memory in use and how jobs are isolated. With -N, one line per node: its \
                  state (idle, mix, alloc, drain, drng, down), CPUs, memory, GPUs and why it is \
                  drained or down.",
    after_help = "Fields (-o): node gpu type memory group features state jobs users util reason.\n\
                  Examples:\n  ysinfo\n  ysinfo -N\n  ysinfo -o gpu,state,jobs -h\n  ysinfo --json"
)]
pub struct Args {
    /// Fields to show, comma-separated (see below)
    #[arg(short = 'o', long, value_name = "FIELDS")]
    pub format: Option<String>,
    /// One line per node: its state, CPUs, memory, GPUs and reason
    #[arg(short = 'N', long = "nodes", conflicts_with = "format")]
    pub nodes: bool,
    /// Leave out the header and the summary lines
    #[arg(short = 'h', long)]
    pub noheader: bool,
    /// Print the nodes as JSON
    #[arg(long, conflicts_with_all = ["format", "noheader", "nodes"])]
    pub json: bool,
    /// Print help
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
}

pub fn run(args: Args) -> CliResult {
    let config = load_config()?;
    let pool = nodes_info(&config)?;
    if args.json {
        return print(&format!("{}\n", serde_json::to_string_pretty(&pool)?));
    }
    if args.nodes {
        return print(&render_nodes(&pool, !args.noheader));
    }
    let mut fields: Vec<String> = args
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
    // In a pool, which node a GPU is on comes first.
    if args.format.is_none() && pool.len() > 1 {
        fields.insert(0, "node".to_string());
    }
    print(&render(&pool, &fields, !args.noheader))
}

/// Every node as ysctld has it now, the controller's own first.
pub fn nodes_info(config: &crate::config::Config) -> Result<Vec<NodeInfo>, CliError> {
    match query("ysinfo", config, Query::Node)? {
        Reply::Nodes { nodes } => Ok(nodes),
        other => Err(CliError::failed(format!(
            "unexpected reply from ysctld: {other:?}"
        ))),
    }
}

fn render(pool: &[NodeInfo], fields: &[String], header: bool) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    if header {
        rows.push(fields.iter().map(|f| f.to_ascii_uppercase()).collect());
    }
    for info in pool {
        rows.extend(info.gpus.iter().map(|g| {
            fields
                .iter()
                .map(|f| match f.as_str() {
                    "node" => info.name.clone(),
                    _ => node::cell(g, f),
                })
                .collect()
        }));
    }
    let mut out = crate::report::table::plain(&rows);
    if header {
        let mem = crate::model::units::format_memory_mb;
        out.push('\n');
        for info in pool {
            out.push_str(&format!(
                "node {} ({}{}): {} GPUs ({}), CPUs {}/{} allocated, memory {}/{} allocated\nisolation: {}\n",
                info.name,
                info.state,
                info.reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default(),
                info.gpus.len(),
                info.gpu_source,
                info.cpus_allocated,
                info.cpus,
                mem(info.memory_allocated_mb),
                mem(info.memory_mb),
                info.isolation
            ));
        }
    }
    out
}

/// `ysinfo -N`: one line per node.
fn render_nodes(pool: &[NodeInfo], header: bool) -> String {
    let mem = crate::model::units::format_memory_mb;
    let mut rows: Vec<Vec<String>> = Vec::new();
    if header {
        rows.push(
            [
                "NODE",
                "STATE",
                "CPUS(A/T)",
                "MEMORY(A/T)",
                "GPUS(A/T)",
                "REASON",
            ]
            .map(String::from)
            .to_vec(),
        );
    }
    for n in pool {
        let allocated = n.gpus.iter().filter(|g| !g.jobs.is_empty()).count();
        rows.push(vec![
            n.name.clone(),
            n.state.clone(),
            format!("{}/{}", n.cpus_allocated, n.cpus),
            format!("{}/{}", mem(n.memory_allocated_mb), mem(n.memory_mb)),
            format!("{allocated}/{}", n.gpus.len()),
            n.reason.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    crate::report::table::plain(&rows)
}
