//! Container images on the pool's nodes: a job's image made present on
//! its nodes before it starts (it waits pending with the reason
//! `ImagePull` meanwhile, holding and charged nothing), the site's
//! `[containers] prefetch` list kept warm on every node, and `yscontrol
//! image pull`. The pulls themselves run on each node, once per image
//! however many jobs want it (`exec::container::pulls`).

use crate::exec::executor::ImageStatus;
use crate::model::container::{ContainerRequest, ImageSource};
use crate::proto::Reply;
use crate::sched::pass::Placement;

use super::access::admins_only;
use super::node_admin::unknown_node;
use super::reads::Reads;
use super::requester::Requester;
use super::seam::ensure_image;
use super::state::Daemon;

impl Daemon {
    /// Whether the image a start needs is present on each of its nodes;
    /// pulls start where it is not (a job with no image, or one from an
    /// archive, which its run loads, is ready).
    pub(super) fn image_readiness(&self, start: &Placement) -> ImageStatus {
        let nodes = std::iter::once(&start.node).chain(&start.peers);
        self.image_readiness_on(start.job, nodes)
    }

    /// The same for job `id` on `nodes`: also what starts the pull for a
    /// job that preempts others, so that it overlaps their grace.
    pub(super) fn image_readiness_on<'a>(
        &self,
        id: crate::model::job::JobId,
        nodes: impl Iterator<Item = &'a String>,
    ) -> ImageStatus {
        let job = self.core.jobs.get(&id);
        let reference = match job.and_then(|j| j.container.as_ref()).map(|c| c.source()) {
            Some(ImageSource::Reference(reference)) => reference,
            Some(ImageSource::Archive(_)) | None => return ImageStatus::Ready,
        };
        let mut readiness = ImageStatus::Ready;
        for name in nodes {
            let Some(node) = self.nodes.named(name) else {
                continue;
            };
            match ensure_image(node, &reference) {
                ImageStatus::Ready => {}
                ImageStatus::Pulling => readiness = ImageStatus::Pulling,
                ImageStatus::Failed(why) => return ImageStatus::Failed(why),
            }
        }
        readiness
    }

    /// Keeps the prefetch list present on every node that runs
    /// containers (a node that joined since included); cheap once they
    /// are.
    pub(super) fn prefetch_images(&self) {
        for node in self.nodes.iter().filter(|n| n.facts().containers) {
            for reference in &self.core.config.containers.prefetch {
                ensure_image(node, reference);
            }
        }
    }

    /// `yscontrol image pull`: makes the image present where
    /// `on_pull_image` says, and says where it stands on each node, a
    /// line per node (`NODE: ready`, `NODE: pulling`, `NODE: failed:
    /// WHY`); the command asks again until none pulls.
    pub(super) fn pull_image(&self, image: &str, node: Option<&str>, who: &Requester) -> Reply {
        let pull = match on_pull_image(&self.reads(), (image, node), who) {
            Ok(pull) => pull,
            Err(refused) => return refused,
        };
        let lines: Vec<String> = pull
            .nodes
            .iter()
            .filter_map(|name| self.nodes.named(name))
            .map(|n| match ensure_image(n, &pull.reference) {
                ImageStatus::Ready => format!("{}: ready", n.name()),
                ImageStatus::Pulling => format!("{}: pulling", n.name()),
                ImageStatus::Failed(why) => format!("{}: failed: {why}", n.name()),
            })
            .collect();
        Reply::Control {
            outcomes: Vec::new(),
            message: Some(format!("{}\n{}", pull.reference, lines.join("\n"))),
        }
    }
}

/// An image to pull, and the nodes to pull it on.
#[derive(Debug, PartialEq)]
pub(super) struct Pull {
    pub(super) reference: String,
    pub(super) nodes: Vec<String>,
}

/// `yscontrol image pull IMAGE [--node NODE]` (admins): the image named
/// in a registry, and `node`, or every node that runs containers; the
/// pulls themselves start at the edge (`Daemon::pull_image`), since they
/// record nothing and are asked again until they are done.
pub(super) fn on_pull_image(
    reads: &dyn Reads,
    (image, node): (&str, Option<&str>),
    who: &Requester,
) -> Result<Pull, Reply> {
    if let Some(refused) = admins_only(who, "pull images") {
        return Err(refused);
    }
    let rejected = |error: String| Err(Reply::Rejected { error });
    let request = match ContainerRequest::new(image) {
        Ok(request) => request,
        Err(e) => return rejected(e.to_string().replacen("--container-image", "image", 1)),
    };
    let reference = match request.source() {
        ImageSource::Reference(reference) => reference,
        ImageSource::Archive(_) => {
            return rejected(format!("'{image}' is an archive: a job loads it when it starts; pull names an image in a registry"))
        }
    };
    let runtimes = reads.container_nodes();
    let nodes = match node {
        Some(name) if runtimes.iter().any(|n| n == name) => vec![name.to_string()],
        Some(name) if reads.node_names().iter().any(|n| n == name) => {
            return rejected(format!("node {name} has no container runtime"))
        }
        Some(name) => return Err(unknown_node(reads, name)),
        None => runtimes,
    };
    if nodes.is_empty() {
        return rejected("no node has a container runtime".into());
    }
    Ok(Pull { reference, nodes })
}

#[cfg(test)]
mod tests {
    use super::super::testing::{requester, Archive};
    use super::*;

    fn refusal(pull: Result<Pull, Reply>) -> String {
        match pull {
            Err(Reply::Rejected { error }) => error,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_administrator_pulls_an_image_of_a_registry_on_the_nodes_that_run_containers() {
        let mut reads = Archive::default();
        let root = requester(0, "root", true);
        let image = "docker.io/ultralytics/ultralytics:8.3.0";
        assert_eq!(
            refusal(on_pull_image(&reads, (image, None), &root)),
            "no node has a container runtime"
        );
        assert_eq!(
            refusal(on_pull_image(&reads, (image, Some("gpu01")), &root)),
            "node gpu01 has no container runtime"
        );
        reads.containers = true;
        let everywhere = on_pull_image(&reads, (image, None), &root).unwrap();
        assert_eq!(everywhere.nodes, ["gpu01"]);
        assert_eq!(everywhere.reference, image);
        let there = on_pull_image(&reads, (image, Some("gpu01")), &root).unwrap();
        assert_eq!(there, everywhere);
        assert_eq!(
            refusal(on_pull_image(&reads, (image, Some("gpu07")), &root)),
            "unknown node 'gpu07' (nodes: gpu01)"
        );
        let alice = requester(1000, "alice", false);
        assert!(refusal(on_pull_image(&reads, (image, None), &alice))
            .contains("only root and the config's admins may pull images"));
    }

    #[test]
    fn an_archive_or_a_bad_name_is_refused_with_what_to_name() {
        let mut reads = Archive::default();
        reads.containers = true;
        let root = requester(0, "root", true);
        let archive = refusal(on_pull_image(&reads, ("/srv/images/yolo.tar", None), &root));
        assert!(archive.contains("is an archive"), "{archive}");
        let bad = refusal(on_pull_image(&reads, ("bad image", None), &root));
        assert!(bad.starts_with("image"), "{bad}");
    }
}
