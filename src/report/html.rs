//! `ysreport --html`: the usage report as one self-contained HTML page, for
//! a manager to open from an email — no script, no external file: inline
//! CSS and inline SVG charts (GPU-hours per account per day, stacked; the
//! wait distribution; each GPU's utilisation per day; the waste ranking).
//! Every name that comes from users is escaped.

use std::fmt::Write as _;

use super::usage::{Line, UsageReport};

/// Text made safe for HTML content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// At most `max` characters of a name, with an ellipsis when cut.
fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let mut s: String = text.chars().take(max - 1).collect();
        s.push('…');
        s
    }
}

/// Colour-blind-safe series colours (Okabe–Ito), cycled.
const PALETTE: [&str; 8] = [
    "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000",
];

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}\
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em}\
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ccc;padding:.25em .5em;text-align:right}\
td.name,th.name{text-align:left;max-width:22em;overflow-wrap:break-word}\
.note{color:#666;font-size:.9em}.figures span{display:inline-block;margin-right:2em}\
svg text{font-size:11px;font-family:system-ui,sans-serif}";

/// The whole page.
pub fn render(report: &UsageReport, cluster: &str) -> String {
    let mut out = String::new();
    let title = format!("GPU usage {} — {}", report.period.label, cluster);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>{}</title><style>{STYLE}</style></head><body>\n<h1>{}</h1>\n",
        escape(&title),
        escape(&title)
    );
    let t = &report.total;
    let _ = writeln!(
        out,
        "<p class=\"figures\"><span><b>{}</b> jobs ended</span><span><b>{:.1}</b> GPU-hours</span>\
         <span><b>{:.1}</b> tokens billed</span><span><b>{}</b> preemptions</span>\
         <span><b>{:.1}</b> GPU-hours idle while jobs waited</span></p>",
        t.jobs, t.gpu_hours, t.tokens, t.preemptions, report.idle_waiting_gpu_hours
    );
    if !report.summarised_months.is_empty() {
        let _ = writeln!(
            out,
            "<p class=\"note\">From monthly summaries (job rows purged): {}.</p>",
            escape(&report.summarised_months.join(", "))
        );
    }

    out.push_str("<h2>GPU-hours per account per day</h2>\n");
    out.push_str(&daily_chart(report));
    out.push_str("<h2>How long jobs waited</h2>\n");
    out.push_str(&wait_chart(report));
    out.push_str("<h2>Utilisation of each GPU per day</h2>\n");
    out.push_str(&gpu_chart(report));

    if !report.budgets.is_empty() {
        out.push_str("<h2>Budgets</h2>\n<table><tr><th class=\"name\">Account</th><th>Budget</th><th>Used</th><th>Left</th></tr>\n");
        for b in &report.budgets {
            let _ = writeln!(
                out,
                "<tr><td class=\"name\">{}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td></tr>",
                escape(&b.account),
                b.budget,
                b.used,
                b.left
            );
        }
        out.push_str("</table>\n");
    }

    out.push_str("<h2>Accounts and users</h2>\n");
    out.push_str(&lines_table(report));
    if !report.checkpoints.is_empty() {
        out.push_str("<h2>Preemptions and checkpoints</h2>\n");
        out.push_str(&checkpoints_table(report));
    }
    out.push_str("<h2>Waste: jobs whose GPUs sat idle longest</h2>\n");
    out.push_str(&waste_table(report));
    let _ = writeln!(
        out,
        "<p class=\"note\">Jobs count in the period they ended in, with all their runs. \
         A job's GPU-hours are drawn on the days before its end that it ran. Made by ysched {}.</p>\
         \n</body></html>",
        env!("CARGO_PKG_VERSION")
    );
    out
}

fn day_label(report: &UsageReport, i: usize) -> String {
    let start = report.period.days[i];
    let date = crate::model::units::format_timestamp(start);
    date.get(5..10).unwrap_or(&date).to_string()
}

/// Stacked bars: one per day, one colour per account.
fn daily_chart(report: &UsageReport) -> String {
    let days = report.period.days.len();
    if days == 0 || report.daily_gpu_hours.is_empty() {
        return "<p class=\"note\">No GPU-hours in this period.</p>\n".into();
    }
    let (width, height, left, bottom, top) = (900.0, 260.0, 50.0, 40.0, 10.0);
    let plot_h = height - bottom - top;
    let totals: Vec<f64> = (0..days)
        .map(|i| report.daily_gpu_hours.values().map(|v| v[i]).sum())
        .collect();
    let max = totals.iter().cloned().fold(0.0, f64::max).max(1e-9);
    let bar_w = (width - left - 10.0) / days as f64;
    let mut svg = format!(
        "<svg id=\"chart-daily\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{}\" role=\"img\" \
         aria-label=\"GPU-hours per account per day\">\n",
        height + 20.0 * report.daily_gpu_hours.len().div_ceil(4) as f64
    );
    axis(&mut svg, left, top, plot_h, width, max, "GPU-hours");
    for i in 0..days {
        let mut y = top + plot_h;
        let x = left + i as f64 * bar_w;
        for (k, (account, values)) in report.daily_gpu_hours.iter().enumerate() {
            let h = values[i] / max * plot_h;
            if values[i] <= 0.0 {
                continue;
            }
            y -= h;
            let _ = writeln!(
                svg,
                "<rect class=\"bar\" x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{}\">\
                 <title>{} {}: {:.2} GPU-hours</title></rect>",
                (bar_w - 1.0).max(0.5),
                PALETTE[k % PALETTE.len()],
                escape(account),
                day_label(report, i),
                values[i]
            );
        }
        if days <= 31 || i % (days / 15).max(1) == 0 {
            let _ = writeln!(
                svg,
                "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                x + bar_w / 2.0,
                top + plot_h + 14.0,
                if days <= 31 {
                    day_label(report, i)[3..].to_string()
                } else {
                    day_label(report, i)
                }
            );
        }
    }
    // Legend, four accounts to a row.
    for (k, account) in report.daily_gpu_hours.keys().enumerate() {
        let x = left + (k % 4) as f64 * 210.0;
        let y = height + (k / 4) as f64 * 20.0 - 8.0;
        let _ = writeln!(
            svg,
            "<rect x=\"{x}\" y=\"{y}\" width=\"12\" height=\"12\" fill=\"{}\"/>\
             <text x=\"{}\" y=\"{}\">{}</text>",
            PALETTE[k % PALETTE.len()],
            x + 16.0,
            y + 10.0,
            escape(&shorten(account, 28))
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// An axis's maximum as a person reads it: `45` jobs, `12.5` GPU-hours.
fn axis_number(max: f64) -> String {
    if max.fract() == 0.0 {
        format!("{max:.0}")
    } else {
        format!("{max:.1}")
    }
}

/// The y axis: a line, 0 and the maximum, and a label.
fn axis(svg: &mut String, left: f64, top: f64, plot_h: f64, width: f64, max: f64, label: &str) {
    let _ = writeln!(
        svg,
        "<line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{bottom}\" stroke=\"#888\"/>\
         <line x1=\"{left}\" y1=\"{bottom}\" x2=\"{width}\" y2=\"{bottom}\" stroke=\"#888\"/>\
         <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\
         <text x=\"{}\" y=\"{bottom}\" text-anchor=\"end\">0</text>\
         <text x=\"4\" y=\"{}\" transform=\"rotate(-90 10 {})\" text-anchor=\"middle\">{label}</text>",
        left - 4.0,
        top + 10.0,
        axis_number(max),
        left - 4.0,
        top + plot_h / 2.0,
        top + plot_h / 2.0,
        bottom = top + plot_h,
    );
}

/// Bars: jobs per wait bucket.
fn wait_chart(report: &UsageReport) -> String {
    let ran: u64 = report.wait_histogram.iter().map(|b| b.jobs).sum();
    if ran == 0 {
        return "<p class=\"note\">No job started in this period's jobs.</p>\n".into();
    }
    let (width, height, left, bottom, top) = (600.0, 220.0, 50.0, 30.0, 10.0);
    let plot_h = height - bottom - top;
    let max = report
        .wait_histogram
        .iter()
        .map(|b| b.jobs)
        .max()
        .unwrap_or(1) as f64;
    let bar_w = (width - left - 10.0) / report.wait_histogram.len() as f64;
    let mut svg = format!(
        "<svg id=\"chart-waits\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" role=\"img\" \
         aria-label=\"Jobs by wait time\">\n"
    );
    axis(&mut svg, left, top, plot_h, width, max, "jobs");
    for (i, b) in report.wait_histogram.iter().enumerate() {
        let h = b.jobs as f64 / max * plot_h;
        let x = left + i as f64 * bar_w + 4.0;
        let _ = writeln!(
            svg,
            "<rect class=\"bar\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{}\">\
             <title>{}: {} jobs</title></rect>\
             <text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            top + plot_h - h,
            bar_w - 8.0,
            PALETTE[0],
            escape(&b.label),
            b.jobs,
            x + (bar_w - 8.0) / 2.0,
            top + plot_h + 14.0,
            escape(&b.label)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// A heat map: a row per GPU, a cell per day, darker for busier; grey
/// where nothing was sampled.
fn gpu_chart(report: &UsageReport) -> String {
    let sampled = report
        .gpus
        .iter()
        .any(|g| g.util_by_day.iter().any(Option::is_some));
    if !sampled {
        return "<p class=\"note\">GPU utilisation was not sampled in this period \
                (no NVIDIA driver answered, or sampling is off).</p>\n"
            .into();
    }
    let days = report.period.days.len();
    let (left, top, cell_w, cell_h) = (70.0, 10.0, (820.0 / days.max(1) as f64).min(26.0), 18.0);
    let width = left + cell_w * days as f64 + 10.0;
    let height = top + cell_h * report.gpus.len() as f64 + 30.0;
    let mut svg = format!(
        "<svg id=\"chart-gpus\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" role=\"img\" \
         aria-label=\"GPU utilisation per day\">\n"
    );
    for (row, g) in report.gpus.iter().enumerate() {
        let y = top + row as f64 * cell_h;
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">GPU {}</text>",
            left - 6.0,
            y + cell_h - 5.0,
            g.gpu
        );
        for (i, util) in g.util_by_day.iter().enumerate() {
            let (fill, what) = match util {
                Some(u) => {
                    // White (idle) to dark blue (busy).
                    let k = (u / 100.0).clamp(0.0, 1.0);
                    let c = |from: f64, to: f64| (from + (to - from) * k).round() as u8;
                    (
                        format!(
                            "#{:02x}{:02x}{:02x}",
                            c(247.0, 8.0),
                            c(251.0, 48.0),
                            c(255.0, 107.0)
                        ),
                        format!("{u:.0}%"),
                    )
                }
                None => ("#e0e0e0".to_string(), "not sampled".to_string()),
            };
            let _ = writeln!(
                svg,
                "<rect class=\"cell\" x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{fill}\">\
                 <title>GPU {} {}: {what}</title></rect>",
                left + i as f64 * cell_w,
                cell_w - 1.0,
                cell_h - 1.0,
                g.gpu,
                day_label(report, i)
            );
        }
    }
    let _ = writeln!(
        svg,
        "<text x=\"{left}\" y=\"{:.1}\">{} to {}: white is idle, dark blue is 100%, grey not sampled</text>",
        height - 8.0,
        day_label(report, 0),
        day_label(report, days.saturating_sub(1))
    );
    svg.push_str("</svg>\n");
    svg
}

fn lines_table(report: &UsageReport) -> String {
    if report.total.jobs == 0 {
        return "<p>No job ended in this period.</p>\n".into();
    }
    let mut out = String::from(
        "<table><tr><th class=\"name\">Account</th><th class=\"name\">User</th><th>Jobs</th>\
         <th>GPU-hours</th><th>Tokens</th><th>Share</th><th>Mean wait</th><th>p95 wait</th>\
         <th>Preempted</th><th>Preempts</th><th>Failed</th><th>Timeout</th><th>OOM</th><th>GPU util</th></tr>\n",
    );
    let wait = |w: Option<i64>| {
        w.map_or("–".into(), |s| {
            crate::model::units::format_duration(s.max(0) as u64)
        })
    };
    let row = |out: &mut String, l: &Line| {
        let _ = writeln!(
            out,
            "<tr><td class=\"name\" title=\"{}\">{}</td><td class=\"name\" title=\"{}\">{}</td><td>{}</td>\
             <td>{:.2}</td><td>{:.2}</td><td>{:.1}%</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&l.account),
            escape(&shorten(&l.account, 40)),
            escape(&l.user),
            escape(&shorten(&l.user, 40)),
            l.jobs,
            l.gpu_hours,
            l.tokens,
            l.share * 100.0,
            wait(l.wait_mean_s.map(|m| m.round() as i64)),
            wait(l.wait_p95_s),
            l.preemptions,
            l.preemptions_caused,
            l.failed,
            l.timeout,
            l.out_of_memory,
            l.gpu_util_mean.map_or("n/a".into(), |u| format!("{u:.1}%")),
        );
    };
    for l in report.accounts.iter().chain(&report.users) {
        row(&mut out, l);
    }
    row(&mut out, &report.total);
    out.push_str("</table>\n");
    out
}

/// Per account: runs stopped by preemption or reclaim, how many
/// checkpointed within their grace and resumed, and the GPU-hours lost.
fn checkpoints_table(report: &UsageReport) -> String {
    let mut out = String::from(
        "<table id=\"checkpoints\"><tr><th class=\"name\">Account</th><th>Stopped</th><th>Reclaims</th>\
         <th>Clean in grace</th><th>Resumed</th><th>Not settled</th><th>GPU-hours lost</th></tr>\n",
    );
    for l in &report.checkpoints {
        let _ = writeln!(
            out,
            "<tr><td class=\"name\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td></tr>",
            escape(&l.account),
            l.stops,
            l.reclaims,
            l.clean_in_grace,
            l.resumed,
            l.unsettled,
            l.gpu_hours_lost
        );
    }
    out.push_str("</table>\n");
    out
}

fn waste_table(report: &UsageReport) -> String {
    if !report.gpu_sampled {
        return "<p class=\"note\">GPU utilisation was not sampled, so there is no waste ranking.</p>\n".into();
    }
    if report.waste.is_empty() {
        return "<p>No job held GPUs idle longer than the threshold.</p>\n".into();
    }
    let mut out = String::from(
        "<table id=\"waste\"><tr><th>Job</th><th class=\"name\">Name</th><th class=\"name\">Account</th>\
         <th class=\"name\">User</th><th>GPUs</th><th>Idle</th><th>Mean util</th><th>GPU-hours wasted</th><th class=\"name\">Verdict</th></tr>\n",
    );
    for w in &report.waste {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td class=\"name\" title=\"{}\">{}</td><td class=\"name\">{}</td><td class=\"name\">{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td class=\"name\">{}</td></tr>",
            w.job_id,
            escape(&w.name),
            escape(&shorten(&w.name, 60)),
            escape(&w.account),
            escape(&w.user),
            w.gpus,
            crate::model::units::format_duration(w.low_secs),
            w.gpu_util_mean.map_or("n/a".into(), |u| format!("{u:.1}%")),
            w.wasted_gpu_hours,
            escape(&w.verdict)
        );
    }
    out.push_str("</table>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::usage::{build, EndedJob, Period};

    #[test]
    fn axes_read_as_counts_or_hours_and_names_keep_their_words() {
        assert_eq!(axis_number(45.0), "45");
        assert_eq!(axis_number(12.25), "12.2");
        assert!(
            !STYLE.contains("overflow-wrap:anywhere"),
            "breaks words mid-way"
        );
    }

    #[test]
    fn hostile_names_come_out_escaped() {
        let name = "<script>alert(\"x\")</script>'&".to_string() + &"n".repeat(500);
        let job = EndedJob {
            id: 7,
            interactive: false,
            name: name.clone(),
            gpus: 2,
            gpu_usage: crate::model::gpu::JobGpuUsage {
                samples: 10,
                utilization_sum: 20,
                low_secs: 7_200,
                ..Default::default()
            },
            account: "<b>acct</b>".into(),
            user: "alice".into(),
            state: crate::model::job::JobState::Completed,
            submit_time: 0,
            begin_time: None,
            start_time: Some(60),
            gpu_seconds: 14_400,
            billing: 14_400,
            preempt_count: 0,
            preemptions_caused: 0,
            end_time: 7_260,
            node: None,
            gpu_type: None,
            image: None,
        };
        let period = Period {
            from: 0,
            to: 2 * 86_400,
            label: "x".into(),
            days: vec![0, 86_400],
        };
        let page = render(&build(period, 3_600, vec![job]), "gpu1");
        assert!(!page.contains("<script>"), "{page}");
        assert!(!page.contains("<b>acct"), "{page}");
        assert!(page.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&#39;&amp;"));
        assert!(page.contains("id=\"chart-daily\""));
        assert!(page.contains("id=\"waste\""));
        // The visible name is cut; the full one stays in the tooltip.
        assert!(page.contains(&format!("{}…", "n".repeat(29))), "{page}");
    }

    #[test]
    fn a_job_s_gpu_hours_land_on_the_days_it_ran() {
        // Ran 2 GPUs from 22:00 on day 0 to 02:00 on day 1: 4 + 4 GPU-hours.
        let job = EndedJob {
            id: 1,
            interactive: false,
            name: "j".into(),
            gpus: 2,
            gpu_usage: Default::default(),
            account: "vision".into(),
            user: "alice".into(),
            state: crate::model::job::JobState::Completed,
            submit_time: 0,
            begin_time: None,
            start_time: Some(79_200),
            gpu_seconds: 2 * 4 * 3_600,
            billing: 0,
            preempt_count: 0,
            preemptions_caused: 0,
            end_time: 86_400 + 7_200,
            node: None,
            gpu_type: None,
            image: None,
        };
        let period = Period {
            from: 0,
            to: 2 * 86_400,
            label: "x".into(),
            days: vec![0, 86_400],
        };
        let r = build(period, 3_600, vec![job]);
        assert_eq!(r.daily_gpu_hours["vision"], vec![4.0, 4.0]);
        assert_eq!(
            r.wait_histogram[4].jobs, 1,
            "waited 22 h: the 6–24 h bucket"
        );
    }
}
