//! The size a HEIF (HEIC, AVIF) claims for its images, read from its boxes before anything decodes it. libheif's
//! `heif-convert` decodes a file's images whole, in a process of its own, up to libheif's own limit of 32,768 ×
//! 32,768: a crafted file claiming 30,000 × 30,000 would have it take 2.7 GB, on a NAS beside PostgreSQL. So a
//! HEIF is held to `storage.max_image_megapixels` as every other still is, by its largest image's `ispe` (the
//! image spatial extents every image item must have), and charged to the pixel budget like a full-size decoder.

/// The largest width × height any image of the HEIF `content` claims (the `ispe` properties in its top-level
/// `meta` box), or `None` when there is none to read (the file is then left to libheif, which refuses an image
/// without one).
///
/// A grid image (how an iPhone stores every photo: tiles put together) is as large as its own data says, which
/// libheif reads and decodes to, whatever its `ispe` claims: so the sizes of the grids are read too
/// ([`grid_sizes`]). A 632-byte file whose `ispe` said 64 × 48 and whose grid said 16,384 × 16,384 had heif-convert
/// use 1.1 GB.
pub(crate) fn largest_image(content: &[u8]) -> Option<(u32, u32)> {
    let meta = child(content, *b"meta")?;
    // `meta` is a full box: a version and flags before its children.
    let children = meta.get(4..)?;
    let ipco = child(child(children, *b"iprp")?, *b"ipco")?;
    boxes(ipco)
        .filter(|(kind, _)| kind == b"ispe")
        .filter_map(|(_, body)| {
            // A full box too: version and flags, then the width and the height.
            let size = body.get(4..12)?;
            Some((u32::from_be_bytes(size[..4].try_into().ok()?), u32::from_be_bytes(size[4..].try_into().ok()?)))
        })
        .chain(grid_sizes(content, children))
        .max_by_key(|(w, h)| u64::from(*w) * u64::from(*h))
}

/// The output sizes of the grid items (`grid` in `iinf`) of a HEIF whose `meta` box holds `children`: each read
/// from the item's data (ISO/IEC 23008-12 `ImageGrid`), which `iloc` places in the file or in `idat`. A grid whose
/// data cannot be found or read claims nothing.
fn grid_sizes<'a>(content: &'a [u8], children: &'a [u8]) -> impl Iterator<Item = (u32, u32)> + 'a {
    let grids = child(children, *b"iinf").map(grid_items).unwrap_or_default();
    let locations = child(children, *b"iloc").map(item_locations).unwrap_or_default();
    let idat = child(children, *b"idat").unwrap_or_default();
    locations.into_iter().filter(move |(id, ..)| grids.contains(id)).filter_map(move |(_, in_idat, at)| {
        let data = if in_idat { idat } else { content };
        let (flags, sizes) = (*data.get(at.checked_add(1)?)?, data.get(at.checked_add(4)?..)?);
        if flags & 1 == 1 {
            let size = sizes.get(..8)?;
            Some((u32::from_be_bytes(size[..4].try_into().ok()?), u32::from_be_bytes(size[4..].try_into().ok()?)))
        } else {
            let size = sizes.get(..4)?;
            Some((u32::from(u16::from_be_bytes([size[0], size[1]])), u32::from(u16::from_be_bytes([size[2], size[3]]))))
        }
    })
}

/// The ids of the `grid` items an `iinf` body lists (its `infe` boxes of version 2 or 3).
fn grid_items(iinf: &[u8]) -> Vec<u32> {
    let entries_at = if iinf.first() == Some(&0) { 6 } else { 8 };
    let Some(entries) = iinf.get(entries_at..) else { return Vec::new() };
    boxes(entries)
        .filter(|(kind, _)| kind == b"infe")
        .filter_map(|(_, infe)| {
            let (id, kind_at) = match *infe.first()? {
                2 => (u32::from(u16::from_be_bytes(infe.get(4..6)?.try_into().ok()?)), 8),
                3 => (u32::from_be_bytes(infe.get(4..8)?.try_into().ok()?), 10),
                _ => return None,
            };
            (infe.get(kind_at..kind_at + 4)? == b"grid").then_some(id)
        })
        .collect()
}

/// Each item of an `iloc` body with where its first extent begins: its id, whether that is in `idat` (construction
/// method 1) rather than the file (0), and the offset.
fn item_locations(iloc: &[u8]) -> Vec<(u32, bool, usize)> {
    let mut at = 0usize;
    let mut read = |n: usize| -> Option<u64> {
        let bytes = iloc.get(at..at.checked_add(n)?)?;
        at += n;
        Some(bytes.iter().fold(0u64, |v, b| v << 8 | u64::from(*b)))
    };
    let mut items = Vec::new();
    let Some(version) = read(4).map(|v| v >> 24) else { return items };
    let (Some(sizes), Some(more)) = (read(1), read(1)) else { return items };
    let (offset_size, length_size, base_size) = ((sizes >> 4) as usize, (sizes & 15) as usize, (more >> 4) as usize);
    let index_size = if version >= 1 { (more & 15) as usize } else { 0 };
    let wide = if version >= 2 { 4 } else { 2 };
    let Some(count) = read(wide) else { return items };
    for _ in 0..count {
        let Some(id) = read(wide) else { break };
        let method = if version >= 1 { read(2).map(|m| m & 15) } else { Some(0) };
        let (Some(method), Some(_), Some(base), Some(extents)) = (method, read(2), read(base_size), read(2)) else {
            break;
        };
        let mut first = None;
        for _ in 0..extents {
            let (Some(_), Some(offset), Some(_)) = (read(index_size), read(offset_size), read(length_size)) else {
                return items;
            };
            first.get_or_insert(offset);
        }
        let start = first.and_then(|offset| usize::try_from(base.checked_add(offset)?).ok());
        if let (Some(start), 0 | 1) = (start, method) {
            items.push((id as u32, method == 1, start));
        }
    }
    items
}

/// The body of the first box of `kind` among the boxes in `content`.
pub(crate) fn child(content: &[u8], kind: [u8; 4]) -> Option<&[u8]> {
    boxes(content).find(|(k, _)| *k == kind).map(|(_, body)| body)
}

/// The boxes one after the other in `content`, each as its type and body, until one that does not fit.
pub(crate) fn boxes(content: &[u8]) -> impl Iterator<Item = ([u8; 4], &[u8])> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let header = content.get(at..at + 8)?;
        let kind: [u8; 4] = header[4..].try_into().ok()?;
        let (size, body_at) = match u32::from_be_bytes(header[..4].try_into().ok()?) {
            // To the end of what holds it.
            0 => (content.len() - at, at + 8),
            // A 64-bit size after the type.
            1 => (usize::try_from(u64::from_be_bytes(content.get(at + 8..at + 16)?.try_into().ok()?)).ok()?, at + 16),
            size => (size as usize, at + 8),
        };
        let end = at.checked_add(size)?;
        let body = content.get(body_at..end)?;
        at = end;
        Some((kind, body))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A box of `kind` around `body`.
    fn boxed(kind: &[u8; 4], body: &[u8]) -> Vec<u8> {
        let mut out = ((8 + body.len()) as u32).to_be_bytes().to_vec();
        out.extend_from_slice(kind);
        out.extend_from_slice(body);
        out
    }

    fn ispe(width: u32, height: u32) -> Vec<u8> {
        boxed(b"ispe", &[&[0, 0, 0, 0][..], &width.to_be_bytes(), &height.to_be_bytes()].concat())
    }

    /// A HEIF's boxes as an encoder lays them out: `ftyp`, then `meta` (a full box) with the item properties.
    fn heif(properties: &[Vec<u8>], meta_size_zero: bool) -> Vec<u8> {
        let ipco = boxed(b"ipco", &properties.concat());
        let iprp = boxed(b"iprp", &[boxed(b"hdlr", &[0; 24]), ipco].concat());
        let mut meta = boxed(b"meta", &[&[0, 0, 0, 0][..], &iprp].concat());
        if meta_size_zero {
            meta[..4].copy_from_slice(&0u32.to_be_bytes());
        }
        [boxed(b"ftyp", b"heic\0\0\0\0mif1heic"), meta].concat()
    }

    #[test]
    fn the_largest_image_a_heif_claims_is_read_from_its_boxes() {
        let grid = heif(&[ispe(512, 512), ispe(4032, 3024), ispe(320, 240)], false);
        assert_eq!(largest_image(&grid), Some((4032, 3024)));
        assert_eq!(largest_image(&heif(&[ispe(30_000, 30_000)], true)), Some((30_000, 30_000)), "a box to the end");
        let mut mdat_first = boxed(b"mdat", &[0xAB; 100]);
        mdat_first.extend(heif(&[ispe(640, 480)], false));
        assert_eq!(largest_image(&mdat_first), Some((640, 480)), "the image data before the boxes that describe it");
    }

    /// A HEIC as heif-enc writes it holds its image as a grid of one tile, its size in `idat` (as an iPhone's holds
    /// 48 tiles): read, and a grid claiming more than its `ispe` claims that.
    #[test]
    fn a_grids_own_size_is_read_whatever_its_ispe_says() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.heic");
        crate::fixtures::heic(&path, 64, 48, 1);
        let heic = std::fs::read(&path).unwrap();
        let meta = child(&heic, *b"meta").unwrap();
        let grids: Vec<_> = grid_sizes(&heic, &meta[4..]).collect();
        assert_eq!(grids, [(64, 48)], "heif-enc writes a grid");
        // The grid's data: version 0, flags 0 (16-bit sizes), one row and one column, then 64 and 48.
        let at = heic.windows(8).position(|w| w == [0, 0, 0, 0, 0, 64, 0, 48]).expect("the grid's data");
        let mut bomb = heic.clone();
        bomb[at + 1] = 1;
        bomb.splice(at + 4..at + 8, [16_384u32.to_be_bytes(), 16_384u32.to_be_bytes()].concat());
        // `idat` grew by four bytes: its box and `meta`'s are four longer (offsets before it are unchanged).
        for kind in [b"meta", b"idat"] {
            let head = bomb.windows(4).position(|w| w == kind).unwrap() - 4;
            let size = u32::from_be_bytes(bomb[head..head + 4].try_into().unwrap()) + 4;
            bomb[head..head + 4].copy_from_slice(&size.to_be_bytes());
        }
        assert_eq!(largest_image(&bomb), Some((16_384, 16_384)));
    }

    #[test]
    fn a_heif_without_sizes_or_with_boxes_cut_short_claims_nothing() {
        assert_eq!(largest_image(&heif(&[], false)), None);
        let whole = heif(&[ispe(640, 480)], false);
        for cut in [0, 7, 20, whole.len() - 1] {
            assert_eq!(largest_image(&whole[..cut]), None, "cut at {cut}");
        }
        let mut lying = whole.clone();
        lying[..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(largest_image(&lying), None, "a box larger than the file");
        let mut large = whole;
        large[..4].copy_from_slice(&1u32.to_be_bytes());
        assert_eq!(largest_image(&large), None, "a 64-bit size cut short");
    }
}
