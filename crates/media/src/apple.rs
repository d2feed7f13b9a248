//! Apple's MakerNote: the camera's burst identifier and a Live Photo still's content identifier.
//!
//! Layout: `"Apple iOS\0"`, two bytes of version, `"MM"` (big-endian), then a TIFF-style IFD at offset 14 whose
//! value offsets count from the start of the MakerNote. Tag 0x000B is the burst UUID, tag 0x0011 the content
//! identifier that ties a Live Photo's still to its video.

const HEADER: &[u8] = b"Apple iOS\0";
const BURST_UUID: u16 = 0x000B;
const CONTENT_IDENTIFIER: u16 = 0x0011;
const ASCII: u16 = 2;

/// What Apple's MakerNote says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppleNote {
    /// The camera's burst identifier.
    pub burst_id: Option<String>,
    /// The Live Photo content identifier.
    pub content_identifier: Option<String>,
}

/// Reads Apple's MakerNote; anything else (another maker, a damaged note) gives nothing.
pub fn read_apple_note(note: &[u8]) -> AppleNote {
    let mut out = AppleNote::default();
    if !note.starts_with(HEADER) || note.get(12..14) != Some(b"MM") {
        return out;
    }
    let u16_at = |at: usize| note.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    let u32_at = |at: usize| note.get(at..at + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize);
    let Some(count) = u16_at(14) else { return out };
    for i in 0..usize::from(count.min(256)) {
        let entry = 16 + i * 12;
        let (Some(tag), Some(kind), Some(len)) = (u16_at(entry), u16_at(entry + 2), u32_at(entry + 4)) else {
            break;
        };
        if kind != ASCII || !(tag == BURST_UUID || tag == CONTENT_IDENTIFIER) {
            continue;
        }
        let bytes = if len <= 4 {
            note.get(entry + 8..entry + 8 + len)
        } else {
            u32_at(entry + 8).and_then(|offset| note.get(offset..offset.checked_add(len)?))
        };
        let text = bytes.and_then(crate::text::metadata_text);
        match tag {
            BURST_UUID => out.burst_id = text,
            _ => out.content_identifier = text,
        }
    }
    out
}

/// Builds an Apple MakerNote with these identifiers (for test fixtures).
pub fn apple_note(burst_id: Option<&str>, content_identifier: Option<&str>) -> Vec<u8> {
    let entries: Vec<(u16, Vec<u8>)> = [(BURST_UUID, burst_id), (CONTENT_IDENTIFIER, content_identifier)]
        .into_iter()
        .filter_map(|(tag, v)| v.map(|v| (tag, [v.as_bytes(), b"\0"].concat())))
        .collect();
    let mut note = HEADER.to_vec();
    note.extend_from_slice(&[0, 1]);
    note.extend_from_slice(b"MM");
    note.extend_from_slice(&(entries.len() as u16).to_be_bytes());
    let mut data_offset = 16 + entries.len() * 12 + 4;
    let mut data = Vec::new();
    for (tag, value) in &entries {
        note.extend_from_slice(&tag.to_be_bytes());
        note.extend_from_slice(&ASCII.to_be_bytes());
        note.extend_from_slice(&(value.len() as u32).to_be_bytes());
        note.extend_from_slice(&(data_offset as u32).to_be_bytes());
        data_offset += value.len();
        data.extend_from_slice(value);
    }
    note.extend_from_slice(&[0; 4]);
    note.extend_from_slice(&data);
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_round_trip_through_a_note() {
        let note = apple_note(Some("B5E2C9A1-BURST"), Some("7F1C-LIVE"));
        let read = read_apple_note(&note);
        assert_eq!(read.burst_id.as_deref(), Some("B5E2C9A1-BURST"));
        assert_eq!(read.content_identifier.as_deref(), Some("7F1C-LIVE"));
        assert_eq!(read_apple_note(&apple_note(None, Some("X-ONLY-ID"))).burst_id, None);
    }

    #[test]
    fn other_makers_and_damaged_notes_give_nothing() {
        assert_eq!(read_apple_note(b"Nikon\0\x02\x10\0\0MM\0\x01"), AppleNote::default());
        let note = apple_note(Some("B5E2C9A1-BURST"), None);
        assert_eq!(read_apple_note(&note[..note.len() - 8]).burst_id, None, "value cut off");
        assert_eq!(read_apple_note(&note[..15]), AppleNote::default());
        let mut little = note.clone();
        little[12..14].copy_from_slice(b"II");
        assert_eq!(read_apple_note(&little), AppleNote::default());
    }
}
