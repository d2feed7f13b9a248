//! The size a HEIF (HEIC, AVIF) claims for its images, read from its boxes before anything decodes it. libheif's
//! `heif-convert` decodes a file's images whole, in a process of its own, up to libheif's own limit of 32,768 ×
//! 32,768: a crafted file claiming 30,000 × 30,000 would have it take 2.7 GB, on a NAS beside PostgreSQL. So a
//! HEIF is held to `storage.max_image_megapixels` as every other still is, by its largest image's `ispe` (the
//! image spatial extents every image item must have), and charged to the pixel budget like a full-size decoder.

/// The largest width × height any image of the HEIF `content` claims (the `ispe` properties in its top-level
/// `meta` box), or `None` when there is none to read (the file is then left to libheif, which refuses an image
/// without one).
pub(crate) fn largest_image(content: &[u8]) -> Option<(u32, u32)> {
    let meta = child(content, *b"meta")?;
    // `meta` is a full box: a version and flags before its children.
    let ipco = child(child(meta.get(4..)?, *b"iprp")?, *b"ipco")?;
    boxes(ipco)
        .filter(|(kind, _)| kind == b"ispe")
        .filter_map(|(_, body)| {
            // A full box too: version and flags, then the width and the height.
            let size = body.get(4..12)?;
            Some((u32::from_be_bytes(size[..4].try_into().ok()?), u32::from_be_bytes(size[4..].try_into().ok()?)))
        })
        .max_by_key(|(w, h)| u64::from(*w) * u64::from(*h))
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
