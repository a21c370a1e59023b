//! The Lua scripts of contract §5, compiled into the binary and named
//! after their files in `lua/` (the name the spans give them).

use fred::types::scripts::Script;

/// A script and the name its spans give it (`db.stored_procedure.name`:
/// its file's, without `.lua`).
#[derive(Debug)]
pub(super) struct Named {
    /// The file name, without `.lua`.
    pub(super) name: &'static str,
    script: Script,
}

impl Named {
    /// Whether running the script a second time, after a first call whose
    /// fate is unknown (its primary died under it), can do no harm: a read
    /// (`lookup`) or a delete (`purge`). Only these are sent again to a
    /// promoted primary at once; a claim or a completion is left to the
    /// sender's retry and to `pipeline::persist`, which know its owner.
    pub(super) fn repeatable(&self) -> bool {
        matches!(self.name, "lookup" | "purge")
    }
}

impl std::ops::Deref for Named {
    type Target = Script;

    fn deref(&self) -> &Script {
        &self.script
    }
}

/// Names a script after its file in `lua/`; `with entity` puts the
/// shared entity rules (`lua/entity.lua`) and probe rules
/// (`lua/probe.lua`) in front of it; `with probe` the probe rules alone.
macro_rules! named {
    ($name:literal) => {
        Named {
            name: $name,
            script: Script::from_lua(include_str!(concat!("../../../lua/", $name, ".lua"))),
        }
    };
    ($name:literal with entity) => {
        Named {
            name: $name,
            script: Script::from_lua(concat!(
                include_str!("../../../lua/entity.lua"),
                include_str!("../../../lua/probe.lua"),
                include_str!(concat!("../../../lua/", $name, ".lua"))
            )),
        }
    };
    ($name:literal with probe) => {
        Named {
            name: $name,
            script: Script::from_lua(concat!(
                include_str!("../../../lua/probe.lua"),
                include_str!(concat!("../../../lua/", $name, ".lua"))
            )),
        }
    };
}

/// The scripts of contract §5, compiled into the binary.
#[derive(Debug)]
pub(super) struct Scripts {
    pub(super) claim: Named,
    pub(super) claim_entity: Named,
    pub(super) complete: Named,
    pub(super) release: Named,
    pub(super) purge: Named,
    pub(super) hold: Named,
    pub(super) entity_set: Named,
    pub(super) renew: Named,
    pub(super) lookup: Named,
    pub(super) swap: Named,
    pub(super) take: Named,
    pub(super) prune: Named,
    pub(super) probe_take: Named,
    pub(super) probe_note: Named,
}

impl Scripts {
    /// Every script, parsed from the text compiled in.
    pub(super) fn new() -> Self {
        Self {
            claim: named!("claim" with probe),
            claim_entity: named!("claim_entity" with entity),
            complete: named!("complete" with entity),
            release: named!("release" with entity),
            purge: named!("purge" with entity),
            hold: named!("hold" with entity),
            entity_set: named!("entity_set" with entity),
            renew: named!("renew"),
            lookup: named!("lookup"),
            swap: named!("swap" with entity),
            take: named!("take"),
            prune: named!("prune"),
            probe_take: named!("probe_take" with probe),
            probe_note: named!("probe_note" with probe),
        }
    }

    /// Every script, for loading them all on a server.
    pub(super) fn all(&self) -> [&Script; 14] {
        [
            &self.claim.script,
            &self.claim_entity.script,
            &self.complete.script,
            &self.release.script,
            &self.purge.script,
            &self.hold.script,
            &self.entity_set.script,
            &self.renew.script,
            &self.lookup.script,
            &self.swap.script,
            &self.take.script,
            &self.prune.script,
            &self.probe_take.script,
            &self.probe_note.script,
        ]
    }
}
