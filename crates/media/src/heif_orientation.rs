//! The orientation of a HEIF's (HEIC's, AVIF's) primary image, read from its boxes. A HEIF says how its image is
//! shown by transformative properties of the image item: `irot` (a turn by quarter turns, anticlockwise) and `imir`
//! (a mirroring), applied one after the other in the order the item's associations list them (ISO/IEC 23008-12).
//! libheif applies them when it decodes, so the JPEG `heif-convert` writes is upright already. An iPhone also writes
//! an EXIF orientation into its HEICs (the same turn); a reader that applies `irot` ignores it, as the specification
//! asks, and so do we: what counts is what libheif shows.

use crate::heif_size::{boxes, child};

/// The orientation the primary image's `irot` and `imir` give, numbered as EXIF numbers orientations (1 to 8, see
/// `still::apply_orientation`): 1 when it has neither, or when the boxes cannot be read (libheif then shows the image
/// as stored, or refuses the file).
pub(crate) fn primary_orientation(content: &[u8]) -> u16 {
    transforms(content).map_or(1, |transforms| transforms.into_iter().fold(Turn::UPRIGHT, Turn::then).exif())
}

/// One transformative property.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transform {
    /// `irot`: this many quarter turns anticlockwise.
    Rotate(u8),
    /// `imir`: left and right exchanged (`axis` 1), or top and bottom (`axis` 0). The 2022 edition of the
    /// specification says so, and libheif 1.15 does so; the first edition's wording was read both ways.
    Mirror {
        /// Left and right exchanged, rather than top and bottom.
        left_right: bool,
    },
}

/// What turns the stored pixels as shown: `quarters` clockwise quarter turns, then left and right exchanged when
/// `mirrored`. EXIF's eight orientations are each one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Turn {
    quarters: u8,
    mirrored: bool,
}

impl Turn {
    const UPRIGHT: Turn = Turn { quarters: 0, mirrored: false };

    /// This turn followed by `transform`.
    fn then(self, transform: Transform) -> Turn {
        let Turn { quarters, mirrored } = self;
        match transform {
            // A mirrored picture turned anticlockwise is the picture turned clockwise by as much, then mirrored.
            Transform::Rotate(anticlockwise) if mirrored => Turn { quarters: (quarters + anticlockwise) % 4, mirrored },
            Transform::Rotate(anticlockwise) => Turn { quarters: (quarters + 4 - anticlockwise % 4) % 4, mirrored },
            Transform::Mirror { left_right: true } => Turn { quarters, mirrored: !mirrored },
            // Top and bottom exchanged: a half turn, then left and right exchanged.
            Transform::Mirror { left_right: false } => Turn { quarters: (quarters + 2) % 4, mirrored: !mirrored },
        }
    }

    /// The EXIF orientation that turns stored pixels the same way.
    fn exif(self) -> u16 {
        const TURNED: [u16; 4] = [1, 6, 3, 8];
        const MIRRORED: [u16; 4] = [2, 5, 4, 7];
        let by_quarters = if self.mirrored { MIRRORED } else { TURNED };
        by_quarters[usize::from(self.quarters % 4)]
    }
}

/// The primary image's transformative properties, in order; `None` when the boxes that say so cannot be read.
fn transforms(content: &[u8]) -> Option<Vec<Transform>> {
    // `meta` is a full box: a version and flags before its children.
    let meta = child(content, *b"meta")?.get(4..)?;
    let primary = primary_item(child(meta, *b"pitm")?)?;
    let iprp = child(meta, *b"iprp")?;
    let properties: Vec<_> = boxes(child(iprp, *b"ipco")?).collect();
    let associated =
        boxes(iprp).filter(|(kind, _)| kind == b"ipma").find_map(|(_, ipma)| associations(ipma, primary))?;
    let transform = |(kind, body): &([u8; 4], &[u8])| match kind {
        b"irot" => Some(Transform::Rotate(body.first()? & 0b11)),
        b"imir" => Some(Transform::Mirror { left_right: body.first()? & 1 == 1 }),
        _ => None,
    };
    // Property indices count from 1; 0 means none.
    Some(associated.into_iter().filter_map(|i| properties.get(i.checked_sub(1)?)).filter_map(transform).collect())
}

/// The item id a `pitm` box names: 16 bits in version 0, 32 bits after.
fn primary_item(pitm: &[u8]) -> Option<u32> {
    match pitm.first()? {
        0 => Some(u32::from(u16::from_be_bytes(pitm.get(4..6)?.try_into().ok()?))),
        _ => Some(u32::from_be_bytes(pitm.get(4..8)?.try_into().ok()?)),
    }
}

/// The property indices an `ipma` box associates with `item`, in its order; `None` when it lists no such item or is
/// cut short. Item ids are 16 bits in version 0 and 32 bits after; each association is a byte, or two when flag 1
/// is set, whose high bit says whether the property is essential and whose other bits are the index.
fn associations(ipma: &[u8], item: u32) -> Option<Vec<usize>> {
    let (id_len, wide) = (if *ipma.first()? == 0 { 2 } else { 4 }, ipma.get(3)? & 1 == 1);
    let entries = u32::from_be_bytes(ipma.get(4..8)?.try_into().ok()?);
    let mut at = 8;
    for _ in 0..entries {
        let id = ipma.get(at..at + id_len)?.iter().fold(0u32, |id, byte| (id << 8) | u32::from(*byte));
        let count = usize::from(*ipma.get(at + id_len)?);
        at += id_len + 1;
        let width = if wide { 2 } else { 1 };
        let list = ipma.get(at..at + count * width)?;
        at += count * width;
        if id == item {
            let index = |a: &[u8]| a.iter().fold(0, |index, byte| (index << 8) | usize::from(*byte));
            let essential = if wide { 0x8000 } else { 0x80 };
            return Some(list.chunks(width).map(|a| index(a) & !essential).collect());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxed(kind: &[u8; 4], body: &[u8]) -> Vec<u8> {
        [&((8 + body.len()) as u32).to_be_bytes()[..], kind, body].concat()
    }

    /// The last `len` bytes of `n` (an item id of 16 or 32 bits, an index of 8 or 16).
    fn be(n: u32, len: usize) -> Vec<u8> {
        n.to_be_bytes()[4 - len..].to_vec()
    }

    /// A HEIF's boxes with the primary item `primary` (`pitm` of `pitm_version`), the `properties`, and one `ipma`
    /// of `version` and `flags` giving each item its associations (indices, with the essential bit).
    fn heif(pitm_version: u8, primary: u32, properties: &[Vec<u8>], ipma: (u8, u8, &[(u32, Vec<u32>)])) -> Vec<u8> {
        let (version, flags, items) = ipma;
        let pitm = [vec![pitm_version, 0, 0, 0], be(primary, if pitm_version == 0 { 2 } else { 4 })].concat();
        let mut map = vec![version, 0, 0, flags];
        map.extend_from_slice(&(items.len() as u32).to_be_bytes());
        for (id, indices) in items {
            map.extend(be(*id, if version == 0 { 2 } else { 4 }));
            map.push(indices.len() as u8);
            for i in indices {
                map.extend(be(*i, if flags & 1 == 1 { 2 } else { 1 }));
            }
        }
        let iprp = boxed(b"iprp", &[boxed(b"ipco", &properties.concat()), boxed(b"ipma", &map)].concat());
        let meta = boxed(b"meta", &[vec![0, 0, 0, 0], boxed(b"pitm", &pitm), iprp].concat());
        [boxed(b"ftyp", b"heic\0\0\0\0mif1heic"), meta].concat()
    }

    fn ispe() -> Vec<u8> {
        boxed(b"ispe", &[0, 0, 0, 0, 0, 0, 2, 128, 0, 0, 1, 224])
    }

    #[test]
    fn irot_and_imir_compose_in_their_order_into_the_exif_orientation() {
        use Transform::{Mirror, Rotate};
        let of = |transforms: &[Transform]| transforms.iter().copied().fold(Turn::UPRIGHT, Turn::then).exif();
        assert_eq!(of(&[]), 1);
        assert_eq!([of(&[Rotate(1)]), of(&[Rotate(2)]), of(&[Rotate(3)])], [8, 3, 6], "anticlockwise quarter turns");
        assert_eq!(of(&[Mirror { left_right: true }]), 2);
        assert_eq!(of(&[Mirror { left_right: false }]), 4);
        assert_eq!(of(&[Rotate(3), Mirror { left_right: false }]), 7);
        assert_eq!(of(&[Mirror { left_right: false }, Rotate(3)]), 5);
        assert_eq!(of(&[Rotate(1), Mirror { left_right: true }]), 7);
        assert_eq!(of(&[Mirror { left_right: true }, Rotate(1)]), 5);
        assert_eq!(of(&[Rotate(1), Rotate(1), Rotate(2)]), 1, "a whole turn");
        assert_eq!(of(&[Mirror { left_right: true }, Mirror { left_right: false }]), 3, "both mirrorings: a half turn");
    }

    #[test]
    fn the_primary_image_s_own_properties_are_read_whatever_the_box_versions() {
        let irot = |a: u8| boxed(b"irot", &[a]);
        let imir = |a: u8| boxed(b"imir", &[a]);
        let properties = [ispe(), irot(3), imir(0), irot(1)];
        // Another item (a thumbnail) turned otherwise comes first; essential bits set on the transforms.
        let items = [(2, vec![1, 0x80 | 4]), (1, vec![1, 0x80 | 2])];
        assert_eq!(primary_orientation(&heif(0, 1, &properties, (0, 0, &items))), 6);
        assert_eq!(primary_orientation(&heif(0, 2, &properties, (0, 0, &items))), 8);
        let wide = [(70_000, vec![1, 0x8000 | 2, 0x8000 | 3])];
        assert_eq!(primary_orientation(&heif(1, 70_000, &properties, (1, 1, &wide))), 7, "32-bit ids, 16-bit indices");
    }

    #[test]
    fn a_heif_without_transforms_or_with_boxes_cut_short_is_upright() {
        let plain = heif(0, 1, &[ispe()], (0, 0, &[(1, vec![1])]));
        assert_eq!(primary_orientation(&plain), 1);
        let turned = heif(0, 1, &[ispe(), boxed(b"irot", &[1])], (0, 0, &[(1, vec![1, 2])]));
        assert_eq!(primary_orientation(&turned), 8);
        let cut = turned.len() - 1;
        assert_eq!(primary_orientation(&turned[..cut]), 1, "cut short");
        let beyond = heif(0, 1, &[ispe()], (0, 0, &[(1, vec![1, 0x80 | 9, 0])]));
        assert_eq!(primary_orientation(&beyond), 1, "an index past the properties, and index 0");
        assert_eq!(primary_orientation(b"not a heif"), 1);
    }
}
