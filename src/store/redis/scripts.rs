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

/// Names a script after its file in `lua/`, the record layout
/// (`lua/record.lua`) in front of it; `with entity` puts the shared entity
/// rules (`lua/entity.lua`) and probe rules (`lua/probe.lua`) there too;
/// `with probe` the probe rules alone.
macro_rules! named {
    ($name:literal) => {
        Named {
            name: $name,
            script: Script::from_lua(concat!(
                include_str!("../../../lua/record.lua"),
                include_str!(concat!("../../../lua/", $name, ".lua"))
            )),
        }
    };
    ($name:literal with entity) => {
        Named {
            name: $name,
            script: Script::from_lua(concat!(
                include_str!("../../../lua/record.lua"),
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
                include_str!("../../../lua/record.lua"),
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

#[cfg(test)]
mod tests {
    /// Every script file of `lua/` (a new one is read too), by name.
    fn files() -> Vec<(String, String)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lua");
        let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
            .expect("lua/")
            .map(|entry| entry.expect("lua/ entry").path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "lua"))
            .map(|path| {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read_to_string(&path).expect("a script"))
            })
            .collect();
        files.sort();
        assert!(files.len() >= 17, "{} scripts", files.len());
        files
    }

    /// The names a script gives to values it read from the store
    /// (`local x = redis.call(…)`, `x = redis.call(…)`).
    fn read_from_store(text: &str) -> Vec<&str> {
        text.lines()
            .filter_map(|line| line.split_once("= redis.call("))
            .map(|(left, _)| left.trim().trim_start_matches("local ").trim())
            .filter(|name| name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
            .collect()
    }

    /// The first argument after the command name of every `redis.call`
    /// (for the commands here, the key), with its line.
    fn key_arguments(text: &str) -> Vec<(&str, &str)> {
        let mut found = Vec::new();
        for line in text.lines() {
            for (_, rest) in line
                .match_indices("redis.call(")
                .map(|(at, _)| line.split_at(at + 11))
            {
                let Some((_, after_command)) = rest.split_once(',') else {
                    continue;
                };
                let argument = after_command
                    .trim_start()
                    .split([',', ')'])
                    .next()
                    .unwrap_or_default()
                    .trim();
                found.push((argument, line));
            }
        }
        found
    }

    /// A script touches only the keys its caller names (Redis' rule for
    /// scripts; a server such as Dragonfly refuses anything else, and a
    /// slot migration moves only the keys a command declares): no key
    /// argument is a value the script read from the store. The pending
    /// change's record key is read by the caller first and declared
    /// (`entity.lua`, `entity_declared`).
    #[test]
    fn no_script_touches_a_key_it_read_from_the_store() {
        for (name, text) in files() {
            let read = read_from_store(&text);
            for (argument, line) in key_arguments(&text) {
                assert!(
                    !read.contains(&argument),
                    "{name} uses {argument:?}, read from the store, as a key: {line}"
                );
            }
        }
    }
}
