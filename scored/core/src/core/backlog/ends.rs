//! How jobs ended, kept for the jobs that may depend on them and for
//! `job ID` of jobs that ended without being admitted.

use std::rc::Rc;

use super::{EndedEarly, Outcome, ENDED_KEPT, OUTCOMES};
use crate::ids::JobId;
use crate::undo::{Undo, UndoDeque};

/// The ends the backlog keeps, which grow with the jobs that end: they
/// log their own changes (`crate::undo`) as the core's other growing
/// containers do, so that a commit after a job's end copies neither.
#[derive(Debug, Clone, Default)]
pub(in crate::core) struct Ends {
    /// How the last [`OUTCOMES`] jobs ended (an array's under its id, once
    /// all of it ended), with their owners, newest last.
    outcomes: UndoDeque<(JobId, u32, Outcome)>,
    /// Jobs that ended without being admitted, newest last.
    pub(in crate::core) ended: UndoDeque<Rc<EndedEarly>>,
}

impl Undo for Ends {
    fn commit(&mut self) {
        self.outcomes.commit();
        self.ended.commit();
    }

    fn rollback(&mut self) {
        self.outcomes.rollback();
        self.ended.rollback();
    }
}

impl Ends {
    /// How a job that ended is known to have ended, with its owner.
    pub(in crate::core) fn outcome(&self, id: JobId) -> Option<(u32, &Outcome)> {
        self.outcomes
            .iter()
            .rev()
            .find(|(known, _, _)| *known == id)
            .map(|(_, owner, outcome)| (*owner, outcome))
    }

    pub(super) fn remember(&mut self, id: JobId, owner: u32, outcome: Outcome) {
        if self.outcomes.len() == OUTCOMES {
            self.outcomes.pop_front();
        }
        self.outcomes.push_back((id, owner, outcome));
    }

    /// The ends kept, oldest first, for the snapshot.
    pub(in crate::core) fn outcomes(&self) -> impl Iterator<Item = &(JobId, u32, Outcome)> {
        self.outcomes.iter()
    }

    /// Puts back the ends the snapshot kept.
    pub(in crate::core) fn restored(outcomes: Vec<(JobId, u32, Outcome)>) -> Ends {
        let mut ends = Ends::default();
        for (id, owner, outcome) in outcomes {
            ends.remember(id, owner, outcome);
        }
        ends
    }

    pub(super) fn end_early(&mut self, ended: EndedEarly) {
        if self.ended.len() == ENDED_KEPT {
            self.ended.pop_front();
        }
        self.ended.push_back(Rc::new(ended));
    }
}
