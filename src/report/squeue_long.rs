//! squeue's long format (`-O/--Format FIELD[:[.][SIZE][SUFFIX]],...`):
//! 22.05's field names, each shown by the field that keeps it, or `N/A`
//! where ysched keeps nothing for it (as squeue shows a value it does not
//! have), under its own name.

use super::{Column, Field, FormatError, SqueueFormat, Width};

/// squeue 22.05's `-O` fields: what shows each (`None`: kept nowhere).
pub const FIELDS: &[(&str, Option<Field>)] = &[
    ("AccrueTime", None),
    ("Account", Some(Field::Account)),
    ("admin_comment", None),
    ("AllocNodes", None),
    ("AllocSID", None),
    ("ArrayJobID", Some(Field::ArrayJobId)),
    ("ArrayTaskID", Some(Field::ArrayTaskId)),
    ("AssocID", None),
    ("BatchFlag", None),
    ("BatchHost", Some(Field::BatchHost)),
    ("BoardsPerNode", None),
    ("BurstBuffer", None),
    ("BurstBufferState", None),
    ("Cluster", None),
    ("ClusterFeature", None),
    ("Command", None),
    ("Comment", Some(Field::Comment)),
    ("Container", Some(Field::ContainerImage)),
    ("Contiguous", None),
    ("Cores", None),
    ("CoreSpec", None),
    ("CPUFreq", None),
    ("cpus-per-task", None),
    ("cpus-per-tres", None),
    ("Deadline", None),
    ("DelayBoot", None),
    ("Dependency", Some(Field::Dependency)),
    ("DerivedEC", None),
    ("EligibleTime", Some(Field::Eligible)),
    ("EndTime", Some(Field::End)),
    ("exit_code", Some(Field::ExitCode)),
    ("Feature", None),
    ("GroupID", None),
    ("GroupName", None),
    ("HetJobID", None),
    ("HetJobIDSet", None),
    ("HetJobOffset", None),
    ("JobArrayID", Some(Field::JobId)),
    ("JobID", Some(Field::JobIdRaw)),
    ("LastSchedEval", None),
    ("Licenses", None),
    ("MaxCPUs", None),
    ("MaxNodes", None),
    ("MCSLabel", None),
    ("mem-per-tres", None),
    ("MinCpus", None),
    ("MinMemory", Some(Field::ReqMem)),
    ("MinTime", None),
    ("MinTmpDisk", None),
    ("Name", Some(Field::Name)),
    ("Network", None),
    ("Nice", Some(Field::Nice)),
    ("NodeList", Some(Field::NodeList)),
    ("Nodes", Some(Field::NodeList)),
    ("NTPerBoard", None),
    ("NTPerCore", None),
    ("NTPerNode", None),
    ("NTPerSocket", None),
    ("NumCPUs", Some(Field::Cpus)),
    ("NumNodes", Some(Field::Nodes)),
    ("NumTasks", None),
    ("Origin", None),
    ("OriginRAW", None),
    ("OverSubscribe", None),
    ("Partition", Some(Field::Partition)),
    ("PendingTime", None),
    ("PreemptTime", None),
    ("Prefer", None),
    ("Priority", Some(Field::Priority)),
    ("PriorityLong", Some(Field::Priority)),
    ("Profile", None),
    ("QOS", Some(Field::Qos)),
    ("Reason", Some(Field::ReasonCode)),
    ("ReasonList", Some(Field::NodeListReason)),
    ("Reboot", None),
    ("ReqNodes", None),
    ("ReqSwitch", None),
    ("Requeue", None),
    ("Reservation", None),
    ("ResizeTime", None),
    ("RestartCnt", Some(Field::Restarts)),
    ("ResvPort", None),
    ("SchedNodes", None),
    ("SCT", None),
    ("SelectJobInfo", None),
    ("SiblingsActive", None),
    ("SiblingsActiveRaw", None),
    ("SiblingsViable", None),
    ("SiblingsViableRaw", None),
    ("Sockets", None),
    ("SPerBoard", None),
    ("StartTime", Some(Field::Start)),
    ("State", Some(Field::State)),
    ("StateCompact", Some(Field::StateCompact)),
    ("STDERR", Some(Field::StdErr)),
    ("STDIN", None),
    ("STDOUT", Some(Field::StdOut)),
    ("StepID", None),
    ("StepName", None),
    ("StepState", None),
    ("SubmitTime", Some(Field::Submit)),
    ("system_comment", None),
    ("Threads", None),
    ("TimeLeft", Some(Field::TimeLeft)),
    ("TimeLimit", Some(Field::TimeLimit)),
    ("TimeUsed", Some(Field::TimeUsed)),
    ("tres-alloc", Some(Field::AllocTres)),
    ("tres-bind", None),
    ("tres-freq", None),
    ("tres-per-job", None),
    ("tres-per-node", Some(Field::TresPerNode)),
    ("tres-per-socket", None),
    ("tres-per-step", None),
    ("tres-per-task", None),
    ("UserID", Some(Field::Uid)),
    ("UserName", Some(Field::User)),
    ("Wait4Switch", None),
    ("WCKey", None),
    ("WorkDir", Some(Field::WorkDir)),
];

/// The width of a `-O` field without a size, in squeue and sinfo.
pub const DEFAULT_WIDTH: usize = 20;

/// One item of a `-O` format (squeue's or sinfo's),
/// `FIELD[:[.][SIZE][SUFFIX]]`, read.
pub struct LongItem<'a> {
    pub name: &'a str,
    /// `.`: aligned right.
    pub right: bool,
    pub width: usize,
    /// Printed after the field.
    pub suffix: &'a str,
}

impl LongItem<'_> {
    pub fn read(item: &str) -> Result<LongItem<'_>, FormatError> {
        let (name, size) = item.split_once(':').unwrap_or((item, ""));
        let (right, size) = match size.strip_prefix('.') {
            Some(rest) => (true, rest),
            None => (false, size),
        };
        let digits = size.len() - size.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let width = match &size[..digits] {
            "" => DEFAULT_WIDTH,
            d => d
                .parse()
                .map_err(|_| FormatError::Width(item.to_string()))?,
        };
        Ok(LongItem {
            name: name.trim(),
            right,
            width,
            suffix: &size[digits..],
        })
    }
}

/// Reads squeue's `-O` format `spec`.
pub fn parse(spec: &str) -> Result<SqueueFormat, FormatError> {
    let mut parts = Vec::new();
    let mut suffix = String::new();
    for item in spec.split(',').filter(|s| !s.is_empty()) {
        let LongItem {
            name,
            right,
            width,
            suffix: after,
        } = LongItem::read(item)?;
        let Some(&(canonical, field)) = FIELDS.iter().find(|(n, _)| n.eq_ignore_ascii_case(name))
        else {
            return Err(FormatError::UnknownLongField(name.to_string()));
        };
        let header = match field {
            Some(f) => f.header().to_string(),
            None => canonical.to_ascii_uppercase(),
        };
        let column = Column {
            field: field.unwrap_or(Field::NotAvailable),
            header,
            width: Width::Exact(width),
            right,
        };
        parts.push((std::mem::take(&mut suffix), column));
        suffix = after.to_string();
    }
    if parts.is_empty() {
        return Err(FormatError::UnknownLongField(spec.to_string()));
    }
    Ok(SqueueFormat {
        parts,
        trailer: suffix,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_field_reads_with_its_size_justification_and_suffix() {
        let format = parse("JobID:8,name:30,StateCompact:.4|,reason,Licenses").unwrap();
        let read: Vec<(&str, Field, Width, bool)> = format
            .parts
            .iter()
            .map(|(text, c)| (text.as_str(), c.field, c.width, c.right))
            .collect();
        assert_eq!(
            read,
            [
                ("", Field::JobIdRaw, Width::Exact(8), false),
                ("", Field::Name, Width::Exact(30), false),
                ("", Field::StateCompact, Width::Exact(4), true),
                ("|", Field::ReasonCode, Width::Exact(20), false),
                ("", Field::NotAvailable, Width::Exact(20), false),
            ]
        );
        assert_eq!(format.parts[4].1.header, "LICENSES");
        assert_eq!(
            parse("JobID,Bogus").unwrap_err().to_string(),
            "Invalid job format specification: Bogus"
        );
    }
}
