//! The marker: the small file beside the database that says idemgate
//! created it, naming its store id and the highest generation seen
//! (`open` module docs say why).

use std::fmt;
use std::io::Write as _;
use std::path::Path;

use super::{OpenError, folder, io, sibling, sync_folder};

/// The marker's first line, for whoever finds the file.
const MARKER_HEADER: &str = "# idemgate embedded store marker: the database file next to me was created by idemgate \
     and holds answered deliveries. Delete me only to start with an empty store on purpose \
     (docs/operations.md, \"Embedded store start-up check\").";
/// The prefix of the marker line that holds the id.
const MARKER_ID: &str = "store_id ";
/// The prefix of the marker line that holds the generation.
const MARKER_GENERATION: &str = "generation ";

/// A store's random identity, shared by the database and its marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoreId(pub(super) [u8; 16]);

impl StoreId {
    pub(super) fn random() -> Self {
        let mut id = [0; 16];
        getrandom::fill(&mut id).expect("the operating system has no random source");
        Self(id)
    }

    pub(super) fn from_bytes(bytes: &[u8]) -> Option<Self> {
        <[u8; 16]>::try_from(bytes).ok().map(Self)
    }

    fn parse(text: &str) -> Option<Self> {
        hex::decode(text.trim())
            .ok()
            .and_then(|b| Self::from_bytes(&b))
    }
}

impl fmt::Display for StoreId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

/// The id found in a database, if it has one (for [`OpenError::Foreign`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FoundId(pub(super) Option<StoreId>);

impl fmt::Display for FoundId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(id) => id.fmt(f),
            None => f.write_str("none"),
        }
    }
}

/// What the marker holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Marker {
    /// The store id.
    pub(super) id: StoreId,
    /// The highest generation written (0 in a marker from before them).
    pub(super) generation: u64,
}

/// What the marker holds; `None` when there is no marker.
pub(super) fn read_marker(path: &Path, marker: &Path) -> Result<Option<Marker>, OpenError> {
    let text = match std::fs::read_to_string(marker) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            return Err(bad_marker(path, marker, "not UTF-8"));
        }
        Err(e) => return Err(io("read", marker)(e)),
    };
    let id = text
        .lines()
        .find_map(|line| line.strip_prefix(MARKER_ID))
        .and_then(StoreId::parse)
        .ok_or_else(|| bad_marker(path, marker, "no store_id line"))?;
    let generation = match text
        .lines()
        .find_map(|line| line.strip_prefix(MARKER_GENERATION))
    {
        None => 0,
        Some(number) => number
            .trim()
            .parse()
            .map_err(|_| bad_marker(path, marker, "a generation that is not a number"))?,
    };
    Ok(Some(Marker { id, generation }))
}

fn bad_marker(path: &Path, marker: &Path, reason: &str) -> OpenError {
    OpenError::BadMarker {
        path: path.to_owned(),
        marker: marker.to_owned(),
        reason: reason.to_owned(),
    }
}

/// Writes the marker for `id` at `generation` atomically (temporary file,
/// fsync, rename, fsync of the folder).
pub(in crate::store::embedded) fn write_marker(
    marker: &Path,
    id: StoreId,
    generation: u64,
) -> Result<(), OpenError> {
    let temporary = sibling(marker, ".tmp");
    let mut file = std::fs::File::create(&temporary).map_err(io("create", &temporary))?;
    writeln!(
        file,
        "{MARKER_HEADER}\n{MARKER_ID}{id}\n{MARKER_GENERATION}{generation}"
    )
    .and_then(|()| file.sync_all())
    .map_err(io("write", &temporary))?;
    std::fs::rename(&temporary, marker).map_err(io("write", marker))?;
    sync_folder(folder(marker))
}
