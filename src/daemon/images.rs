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

    /// `yscontrol image pull` (admins): starts making `image` present on
    /// `node`, or on every node that runs containers, and says where it
    /// stands on each, a line per node (`NODE: ready`, `NODE: pulling`,
    /// `NODE: failed: WHY`); the command asks again until none pulls.
    pub(super) fn pull_image(&self, image: &str, node: Option<&str>, who: &Requester) -> Reply {
        if let Some(refused) = admins_only(who, "pull images") {
            return refused;
        }
        let rejected = |error: String| Reply::Rejected { error };
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
        let nodes: Vec<_> = match node {
            Some(name) => match self.nodes.named(name) {
                Some(n) if n.facts().containers => vec![n],
                Some(_) => return rejected(format!("node {name} has no container runtime")),
                None => return self.unknown_node(name),
            },
            None => self.nodes.iter().filter(|n| n.facts().containers).collect(),
        };
        if nodes.is_empty() {
            return rejected("no node has a container runtime".into());
        }
        let lines: Vec<String> = nodes
            .iter()
            .map(|n| match ensure_image(n, &reference) {
                ImageStatus::Ready => format!("{}: ready", n.name()),
                ImageStatus::Pulling => format!("{}: pulling", n.name()),
                ImageStatus::Failed(why) => format!("{}: failed: {why}", n.name()),
            })
            .collect();
        Reply::Control {
            outcomes: Vec::new(),
            message: Some(format!("{reference}\n{}", lines.join("\n"))),
        }
    }
}
