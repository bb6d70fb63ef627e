//! The portal's pages, rendered on the server from the daemon's answers.
//! Everything that comes from users (names, comments, paths, output) goes
//! through `escape`; no page has an inline script or style attribute (the
//! CSP forbids both).

use std::fmt::Write as _;

use crate::model::units::{format_elapsed, format_time_limit, format_timestamp};
use crate::proto::TestOnly;
use crate::report::html::escape;
use crate::report::node::NodeInfo;
use crate::report::view::JobView;

/// Who the page is for: their name and their forms' CSRF token.
pub struct Viewer<'a> {
    pub user: &'a str,
    pub csrf: &'a str,
}

const NAV: [(&str, &str); 6] = [
    ("/queue", "Queue"),
    ("/gpus", "GPUs"),
    ("/mine", "My jobs"),
    ("/submit", "Submit"),
    ("/accounting", "Accounting"),
    ("/approvals", "Approvals"),
];

/// A whole page: the header with the navigation, and `body`.
pub fn layout(title: &str, here: &str, viewer: Option<&Viewer>, body: &str) -> String {
    let mut nav = String::new();
    if let Some(v) = viewer {
        for (path, label) in NAV {
            let class = if path == here { " class=\"here\"" } else { "" };
            let _ = write!(nav, "<a href=\"{path}\"{class}>{label}</a>");
        }
        let _ = write!(
            nav,
            "<span class=\"who\">{} <form method=\"post\" action=\"/logout\">{}<button>Sign out</button></form></span>",
            escape(v.user),
            csrf_field(v.csrf)
        );
    }
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · ysched</title><link rel=\"stylesheet\" href=\"/static/portal.css\"></head>\
         <body><header><strong>ysched</strong>{nav}</header><main><h1>{}</h1>{body}</main>\
         <script src=\"/static/portal.js\"></script></body></html>",
        escape(title),
        escape(title)
    )
}

pub fn csrf_field(csrf: &str) -> String {
    format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        escape(csrf)
    )
}

/// The sign-in page.
pub fn login(problem: Option<&str>) -> String {
    let problem = problem.map_or(String::new(), |p| {
        format!("<p class=\"error\">{}</p>", escape(p))
    });
    let body = format!(
        "{problem}<form method=\"post\" action=\"/login\">\
         <label for=\"token\">Your token</label>\
         <input type=\"password\" id=\"token\" name=\"token\" autocomplete=\"off\" required>\
         <p class=\"note\">Run <code>ystoken --lifespan 8:00:00</code> on the controller and paste what follows <code>SLURM_JWT=</code>.</p>\
         <button type=\"submit\" id=\"sign-in\">Sign in</button></form>"
    );
    layout("Sign in", "", None, &body)
}

/// One action button on a job: a form posting to `/job/ID/ACTION`.
fn action(id: &str, action: &str, label: &str, csrf: &str, danger: bool) -> String {
    format!(
        "<form method=\"post\" action=\"/job/{id}/{action}\">{}<button{} name=\"do\" value=\"{action}\">{label}</button></form> ",
        csrf_field(csrf),
        if danger { " class=\"danger\"" } else { "" }
    )
}

/// The buttons for what `viewer` may do to their own job.
fn actions(view: &JobView, viewer: &Viewer) -> String {
    let job = &view.job;
    let id = job.display_id();
    let mut out = String::new();
    if viewer.user != job.user {
        return out;
    }
    if job.state.can_cancel() {
        out.push_str(&action(&id, "cancel", "Cancel", viewer.csrf, true));
    }
    if job.state == crate::model::job::JobState::Pending {
        match job.hold {
            None => out.push_str(&action(&id, "hold", "Hold", viewer.csrf, false)),
            Some(crate::model::job::Hold::User) => {
                out.push_str(&action(&id, "release", "Release", viewer.csrf, false))
            }
            Some(_) => {}
        }
    }
    out
}

fn gpus_of(view: &JobView) -> String {
    let job = &view.job;
    if job.gpus.count == 0 {
        return "0".into();
    }
    let kind = job
        .gpus
        .gpu_type
        .as_deref()
        .map(|t| format!("{t}:"))
        .unwrap_or_default();
    let mut text = format!("{kind}{}", job.gpus.count);
    if job.state.holds_gpus() && !job.gpus_alloc.is_empty() {
        let ids: Vec<String> = job.gpus_alloc.iter().map(u32::to_string).collect();
        let _ = write!(
            text,
            " ({}{})",
            job.node
                .as_deref()
                .map(|n| format!("{n}:"))
                .unwrap_or_default(),
            ids.join(",")
        );
    }
    escape(&text)
}

fn reason_of(view: &JobView) -> String {
    let reason = view
        .pending_reason
        .as_deref()
        .map(str::to_string)
        .or_else(|| view.job.reason.clone())
        .unwrap_or_default();
    escape(&reason)
}

fn time_of(view: &JobView, now: i64) -> String {
    let job = &view.job;
    format!(
        "{} / {}",
        format_elapsed(job.elapsed(now)),
        format_time_limit(job.time_limit)
    )
}

/// The rows of a job table; with `viewer`, the actions they may take.
pub fn job_rows(jobs: &[&JobView], now: i64, viewer: Option<&Viewer>) -> String {
    let mut rows = String::new();
    for view in jobs {
        let job = &view.job;
        let id = job.display_id();
        let actions = viewer.map_or(String::new(), |v| actions(view, v));
        let _ = write!(
            rows,
            "<tr id=\"job-{id}\"><td><a href=\"/job/{id}\">{id}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{actions}</td></tr>",
            escape(&job.name),
            escape(&job.user),
            escape(&job.account),
            escape(&job.qos),
            job.state.name(),
            gpus_of(view),
            time_of(view, now),
            reason_of(view),
        );
    }
    if jobs.is_empty() {
        rows.push_str("<tr><td colspan=\"10\" class=\"note\">No jobs.</td></tr>");
    }
    rows
}

/// Which page of a long list this is, with links to the others.
pub fn pager(path: &str, number: usize, pages: usize, jobs: usize) -> String {
    let link = |n: usize, label: &str| format!("<a href=\"{path}?page={n}\">{label}</a>");
    let mut out = format!("<p class=\"note\" id=\"pager\">Page {number} of {pages} ({jobs} jobs) ");
    if number > 1 {
        out.push_str(&link(number - 1, "‹ previous"));
        out.push(' ');
    }
    if number < pages {
        out.push_str(&link(number + 1, "next ›"));
    }
    out.push_str("</p>");
    out
}

/// A job table whose body reloads itself from `refresh`.
pub fn job_table(rows: &str, refresh: &str) -> String {
    format!(
        "<div class=\"scroll\"><table><thead><tr><th>Job</th><th>Name</th><th>User</th><th>Account</th><th>QoS</th><th>State</th><th>GPUs</th><th>Time / limit</th><th>Reason</th><th></th></tr></thead>\
         <tbody id=\"jobs\" data-refresh=\"{refresh}\">{rows}</tbody></table></div>"
    )
}

/// Each node with each GPU: its state, the jobs and users on it, and its
/// utilisation where it is measured.
pub fn gpu_map(nodes: &[NodeInfo]) -> String {
    let mut out = String::from("<div class=\"nodes\">");
    for node in nodes {
        let _ = write!(
            out,
            "<section class=\"node\"><h2 class=\"node-name\">{} <span class=\"note\">{}</span></h2><p class=\"note\">CPUs {}/{} · memory {}/{} MB</p><div class=\"gpus\">",
            escape(&node.name),
            escape(&node.state),
            node.cpus_allocated,
            node.cpus,
            node.memory_allocated_mb,
            node.memory_mb
        );
        for gpu in &node.gpus {
            let util = gpu.utilization_pct.map_or(String::new(), |u| {
                let step = (u.min(100) / 10) * 10;
                format!(
                    "<div class=\"bar\" title=\"{u}%\"><span class=\"w{step}\"></span></div>{u}%"
                )
            });
            let holders = if gpu.jobs.is_empty() {
                escape(&gpu.state)
            } else {
                format!(
                    "job {}<br>{}",
                    escape(&gpu.jobs.join(", ")),
                    escape(&gpu.users.join(", "))
                )
            };
            let _ = write!(
                out,
                "<div class=\"gpu {}\"><strong>{} {}</strong><br>{holders}<br>{util}</div>",
                escape(&gpu.state),
                gpu.index,
                escape(&gpu.gpu_type),
            );
        }
        out.push_str("</div></section>");
    }
    out.push_str("</div>");
    out
}

/// The end of a job's output, or why it is not shown.
pub enum OutputTail {
    Shown {
        path: String,
        text: String,
        truncated: bool,
    },
    Withheld(String),
}

/// One job in full, its actions, its steps, and the end of its output
/// (or why not).
pub fn job_page(
    view: &JobView,
    now: i64,
    viewer: &Viewer,
    output: OutputTail,
    steps: &[JobView],
) -> String {
    let job = &view.job;
    let mut out = String::from("<div class=\"scroll\"><table>");
    let mut row = |label: &str, value: String| {
        let _ = write!(out, "<tr><th>{label}</th><td>{value}</td></tr>");
    };
    row("Name", escape(&job.name));
    if job.interactive {
        row("Kind", "interactive session (salloc, srun)".into());
    }
    row("User", escape(&job.user));
    row(
        "Account / QoS",
        format!("{} / {}", escape(&job.account), escape(&job.qos)),
    );
    row("State", format!("{} {}", job.state.name(), reason_of(view)));
    row("GPUs", gpus_of(view));
    row("Time / limit", time_of(view, now));
    row("Submitted", format_timestamp(job.submit_time));
    if let Some(start) = job.start_time {
        row("Started", format_timestamp(start));
    }
    if let Some(exit) = &job.exit {
        row("Exit", escape(&exit.to_string()));
    }
    row("Comment", escape(job.comment.as_deref().unwrap_or("")));
    out.push_str("</table></div>");
    let _ = write!(out, "<p>{}</p>", actions(view, viewer));
    if job.gpus.count > 0 && job.start_time.is_some() {
        out.push_str("<h2>GPU use</h2><ul id=\"gpu-use\">");
        for line in crate::report::efficiency::gpu_lines(view) {
            let _ = write!(out, "<li>{}</li>", escape(&line));
        }
        out.push_str("</ul>");
    }
    out.push_str(&step_table(steps, now));
    out.push_str("<h2>Output</h2>");
    match output {
        OutputTail::Shown {
            path,
            text,
            truncated,
        } => {
            let _ = write!(
                out,
                "<p class=\"note\">{}{}</p><pre class=\"output\" id=\"output\">{}</pre>",
                escape(&path),
                if truncated { " (its end)" } else { "" },
                escape(&text)
            );
        }
        OutputTail::Withheld(why) => {
            let _ = write!(out, "<p class=\"note\" id=\"output\">{}</p>", escape(&why));
        }
    }
    out
}

/// A job's steps, a row each: its id, command, state, exit, times,
/// tasks and nodes (nothing for a job without steps).
fn step_table(steps: &[JobView], now: i64) -> String {
    if steps.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "<h2>Steps</h2><div class=\"scroll\"><table id=\"steps\"><tr><th>Step</th><th>Command</th>\
         <th>State</th><th>Exit</th><th>Started</th><th>Elapsed</th><th>Tasks</th><th>Nodes</th></tr>",
    );
    for view in steps {
        let (job, Some(step)) = (&view.job, &view.step) else {
            continue;
        };
        let elapsed = job
            .start_time
            .map(|s| format_elapsed((job.end_time.unwrap_or(now) - s).max(0) as u64))
            .unwrap_or_default();
        let _ = write!(
            out,
            "<tr><td>{}.{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{elapsed}</td><td>{}</td><td>{}</td></tr>",
            job.display_id(),
            step.id,
            escape(&job.name),
            job.state.name(),
            job.exit.map(|e| e.to_string()).unwrap_or_default(),
            job.start_time.map(format_timestamp).unwrap_or_default(),
            step.tasks,
            escape(&job.nodelist()),
        );
    }
    out.push_str("</table></div>");
    out
}

/// What the submit form offers.
pub struct SubmitChoices {
    pub gpu_types: Vec<String>,
    pub qos: Vec<String>,
    pub accounts: Vec<String>,
}

/// The submit form, filled with `values` (a form sent back), and the
/// preview of what it would cost.
pub fn submit_form(
    choices: &SubmitChoices,
    values: &[(String, String)],
    csrf: &str,
    preview: &str,
) -> String {
    let value = |k: &str| {
        values
            .iter()
            .find(|(n, _)| n == k)
            .map_or(String::new(), |(_, v)| escape(v))
    };
    let options = |list: &[String], selected: &str, any: &str| {
        let mut o = format!("<option value=\"\">{any}</option>");
        for item in list {
            let e = escape(item);
            let sel = if e == selected { " selected" } else { "" };
            let _ = write!(o, "<option value=\"{e}\"{sel}>{e}</option>");
        }
        o
    };
    format!(
        "<form method=\"post\" action=\"/submit\" id=\"submit-form\">{}\
         <label for=\"name\">Name</label><input type=\"text\" id=\"name\" name=\"name\" value=\"{}\">\
         <label for=\"command\">Command (or a script below)</label><input type=\"text\" id=\"command\" name=\"command\" value=\"{}\" placeholder=\"python train.py --epochs 100\">\
         <label for=\"script\">Script</label><textarea id=\"script\" name=\"script\" placeholder=\"#!/bin/bash&#10;#SBATCH ...\">{}</textarea>\
         <label for=\"gpus\">GPUs</label><input type=\"number\" id=\"gpus\" name=\"gpus\" min=\"0\" max=\"64\" value=\"{}\">\
         <label for=\"gpu_type\">GPU type</label><select id=\"gpu_type\" name=\"gpu_type\">{}</select>\
         <label for=\"image\">Container image (optional)</label><input type=\"text\" id=\"image\" name=\"image\" value=\"{}\" placeholder=\"registry.lab:5000/vision/yolo:v8.2.1\">\
         <label for=\"time\">Time limit</label><input type=\"text\" id=\"time\" name=\"time\" value=\"{}\" placeholder=\"4:00:00\">\
         <label for=\"qos\">Priority (QoS)</label><select id=\"qos\" name=\"qos\">{}</select>\
         <label for=\"account\">Account</label><select id=\"account\" name=\"account\">{}</select>\
         <label for=\"dir\">Working directory</label><input type=\"text\" id=\"dir\" name=\"dir\" value=\"{}\" placeholder=\"your home\">\
         <div id=\"preview\">{preview}</div>\
         <button type=\"submit\" formaction=\"/submit/preview\">Check</button> <button type=\"submit\" id=\"submit\">Submit</button></form>",
        csrf_field(csrf),
        value("name"),
        value("command"),
        value("script"),
        if value("gpus").is_empty() { "1".into() } else { value("gpus") },
        options(&choices.gpu_types, &value("gpu_type"), "any"),
        value("image"),
        value("time"),
        options(&choices.qos, &value("qos"), "default"),
        options(&choices.accounts, &value("account"), "default"),
        value("dir"),
    )
}

/// What a submission would do (`--test-only`).
pub fn preview(test: &TestOnly) -> String {
    let mut out = String::new();
    let cost = test
        .tokens
        .map_or("no limit: give a time limit to know".to_string(), |t| {
            format!("{t:.2} tokens at most")
        });
    let _ = write!(
        out,
        "<p><strong>Cost:</strong> <span id=\"cost\">{}</span></p>",
        escape(&cost)
    );
    let start = match (test.start, &test.unknown) {
        (Some(t), _) => format!(
            "about {}{}",
            format_timestamp(t),
            test.node
                .as_deref()
                .map(|n| format!(" on {n}"))
                .unwrap_or_default()
        ),
        (None, Some(why)) => why.clone(),
        (None, None) => "unknown".into(),
    };
    let _ = write!(
        out,
        "<p><strong>Would start:</strong> {}</p>",
        escape(&start)
    );
    let _ = write!(
        out,
        "<p><strong>Account / QoS:</strong> {} / {}</p>",
        escape(&test.account),
        escape(&test.qos)
    );
    match &test.approval {
        Some(why) => {
            let _ = write!(
                out,
                "<p class=\"error\" id=\"approval\">Needs a coordinator's approval: {}</p>",
                escape(why)
            );
        }
        None => out.push_str("<p class=\"ok\" id=\"approval\">Needs no approval.</p>"),
    }
    for w in &test.warnings {
        let _ = write!(out, "<p class=\"error\">{}</p>", escape(w));
    }
    out
}

/// A problem, as a paragraph.
pub fn problem(text: &str) -> String {
    format!("<p class=\"error\" id=\"problem\">{}</p>", escape(text))
}

/// Budgets and the month's usage, with the full report a click away.
pub fn accounting(
    budgets: &[serde_json::Value],
    report: &crate::report::usage::UsageReport,
) -> String {
    let mut out = String::from("<h2>Token budgets</h2><div class=\"scroll\"><table><tr><th>Account</th><th>Period</th><th class=\"num\">Budget</th><th class=\"num\">Used</th><th class=\"num\">Left</th><th class=\"num\">Per day</th><th>Runs out</th></tr>");
    for b in budgets {
        let num = |k: &str| b[k].as_f64().map_or("—".into(), |v| format!("{v:.1}"));
        let runs_out = b["runs_out_at"]
            .as_i64()
            .map_or("—".into(), format_timestamp);
        let warn = if b["warning"].as_bool() == Some(true) {
            " class=\"error\""
        } else {
            ""
        };
        let _ = write!(
            out,
            "<tr{warn}><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{runs_out}</td></tr>",
            escape(b["account"].as_str().unwrap_or("")),
            escape(b["period"].as_str().unwrap_or("")),
            num("budget"),
            num("used"),
            num("left"),
            num("burn_per_day"),
        );
    }
    if budgets.is_empty() {
        out.push_str("<tr><td colspan=\"7\" class=\"note\">No budget you may see.</td></tr>");
    }
    out.push_str("</table></div>");
    let _ = write!(out, "<h2>Usage, {}</h2><div class=\"scroll\"><table><tr><th>Account</th><th>User</th><th class=\"num\">Jobs</th><th class=\"num\">GPU-hours</th><th class=\"num\">Tokens</th><th class=\"num\">Idle GPU-hours</th></tr>", escape(&report.period.label));
    for line in report.accounts.iter().chain(report.users.iter()) {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{:.2}</td><td class=\"num\">{:.2}</td><td class=\"num\">{:.2}</td></tr>",
            escape(&line.account),
            escape(&line.user),
            line.jobs,
            line.gpu_hours,
            line.tokens,
            line.idle_gpu_hours
        );
    }
    out.push_str("</table></div>");
    let _ = write!(out, "<h2>By GPU type</h2><div class=\"scroll\"><table><tr><th>GPU type</th><th class=\"num\">Jobs</th><th class=\"num\">GPU-hours</th><th class=\"num\">Tokens</th></tr>");
    for t in &report.gpu_types {
        let _ = write!(
            out,
            "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{:.2}</td><td class=\"num\">{:.2}</td></tr>",
            escape(&t.gpu_type),
            t.jobs,
            t.gpu_hours,
            t.tokens
        );
    }
    out.push_str("</table></div><p><a href=\"/accounting/report\">The full report, with charts</a> (usage over time, per account, waits, each GPU, waste).</p>");
    out
}

/// Jobs waiting for a coordinator's approval, with approve and reject
/// (cancel) for each; the daemon decides who may.
pub fn approvals(jobs: &[&JobView], now: i64, viewer: &Viewer) -> String {
    let mut rows = String::new();
    for view in jobs {
        let job = &view.job;
        let id = job.display_id();
        let _ = write!(
            rows,
            "<tr id=\"job-{id}\"><td><a href=\"/job/{id}\">{id}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}{}</td></tr>",
            escape(&job.name),
            escape(&job.user),
            escape(&job.account),
            gpus_of(view),
            format_time_limit(job.time_limit),
            format_elapsed((now - job.submit_time).max(0) as u64),
            action(&id, "approve", "Approve", viewer.csrf, false),
            action(&id, "cancel", "Reject", viewer.csrf, true),
        );
    }
    if jobs.is_empty() {
        rows.push_str("<tr><td colspan=\"8\" class=\"note\">No job waits for approval.</td></tr>");
    }
    format!(
        "<div class=\"scroll\"><table><thead><tr><th>Job</th><th>Name</th><th>User</th><th>Account</th><th>GPUs</th><th>Limit</th><th>Waiting</th><th></th></tr></thead><tbody>{rows}</tbody></table></div>"
    )
}
