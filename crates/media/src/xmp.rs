//! XMP: the capture date in a packet embedded in a file (any format: packets are found by scanning, as the XMP
//! specification allows) or in a sidecar next to the original (`NAME.EXT.xmp`, `NAME.xmp`), as digiKam,
//! darktable and Lightroom write them.
//!
//! Parsed with `roxmltree` (no DTD, so no entity expansion; a node limit), by namespace, so the prefix a
//! writer chose does not matter. Properties are read whether written as attributes of `rdf:Description` or as
//! elements.

use almanac_domain::{CaptureSource, CaptureTime};
use memchr::memmem;

use crate::dates::parse_date_text;

const EXIF_NS: &str = "http://ns.adobe.com/exif/1.0/";
const PHOTOSHOP_NS: &str = "http://ns.adobe.com/photoshop/1.0/";
const XMP_NS: &str = "http://ns.adobe.com/xap/1.0/";

/// The date properties, best first.
const DATE_PROPERTIES: [(&str, &str); 3] =
    [(EXIF_NS, "DateTimeOriginal"), (PHOTOSHOP_NS, "DateCreated"), (XMP_NS, "CreateDate")];

/// A packet larger than this is not read (a sidecar with a long edit history is well under it).
pub const MAX_XMP_BYTES: usize = 4 * 1024 * 1024;

/// A packet declaring more namespaces than this is not read. `roxmltree` copies every namespace in scope into each
/// element that declares one, so nested declarations cost the cube of their number: 1,000 of them took 0.3 s, 8,000
/// (183 KB) two minutes, and the 65,535 it allows (1.5 MB, under [`MAX_XMP_BYTES`]) a day, on a thread nothing can
/// stop. A sidecar declares a few dozen (Lightroom some twenty); Photoshop's embedded packet declares some ten again
/// for each document placed in it, so a composite of dozens stays under this.
const MAX_NAMESPACE_DECLARATIONS: usize = 1_024;

/// At most this many packets are tried in one file (a file may embed thumbnails with packets of their own).
const MAX_PACKETS: usize = 4;

/// The best date in an XMP packet embedded in `content` (the first packet that has one).
pub fn embedded_xmp_date(content: &[u8]) -> Option<CaptureTime> {
    packets(content).take(MAX_PACKETS).find_map(|p| xmp_date(p, CaptureSource::XmpEmbedded))
}

/// The best date in an XMP document (a sidecar's whole content, or one packet), tagged with `source`. Gives
/// nothing for text that is not XMP, has no date, is larger than [`MAX_XMP_BYTES`], or declares more namespaces
/// than [`MAX_NAMESPACE_DECLARATIONS`]. Blocking: a packet near its limits takes a while to parse.
pub fn xmp_date(packet: &[u8], source: CaptureSource) -> Option<CaptureTime> {
    if packet.len() > MAX_XMP_BYTES {
        return None;
    }
    let text = std::str::from_utf8(packet).ok()?;
    // Packets written into binary files may carry padding or a byte-order mark around the XML.
    let text = text.trim_start_matches('\u{feff}').trim_matches(|c: char| c == '\0' || c.is_whitespace());
    if memmem::find_iter(text.as_bytes(), b"xmlns").nth(MAX_NAMESPACE_DECLARATIONS).is_some() {
        return None;
    }
    let options = roxmltree::ParsingOptions { allow_dtd: false, nodes_limit: 100_000 };
    let doc = roxmltree::Document::parse_with_options(text, options).ok()?;
    DATE_PROPERTIES.iter().find_map(|(ns, name)| {
        doc.descendants().filter(roxmltree::Node::is_element).find_map(|node| {
            let value = node.attribute((*ns, *name)).or_else(|| {
                (node.tag_name().namespace() == Some(*ns) && node.tag_name().name() == *name)
                    .then(|| node.text())
                    .flatten()
            })?;
            parse_date_text(value).map(|stamp| stamp.capture(source))
        })
    })
}

/// The XMP packets in a file, in order: each from `<x:xmpmeta` (or, without that wrapper, `<rdf:RDF`) to its
/// closing tag.
fn packets(content: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut from = 0;
    std::iter::from_fn(move || {
        let rest = content.get(from..)?;
        let (start, close): (usize, &[u8]) = match memmem::find(rest, b"<x:xmpmeta") {
            Some(at) => (at, b"</x:xmpmeta>"),
            None => (memmem::find(rest, b"<rdf:RDF")?, b"</rdf:RDF>"),
        };
        let limit = rest.len().min(start + MAX_XMP_BYTES);
        let Some(len) = memmem::find(&rest[start..limit], close) else {
            from = content.len();
            return None;
        };
        let end = start + len + close.len();
        from += end;
        Some(&rest[start..end])
    })
}

/// A file's sidecar names, best first: `NAME.EXT.xmp` (darktable, digiKam), then `NAME.xmp` (Lightroom).
/// Matched without regard to case, as the walk does.
pub fn sidecar_names(file_name: &[u8]) -> [Vec<u8>; 2] {
    let full = [file_name, b".xmp"].concat();
    let stem = match file_name.iter().rposition(|c| *c == b'.') {
        Some(dot) if dot > 0 => &file_name[..dot],
        _ => file_name,
    };
    [full, [stem, b".xmp"].concat()]
}

/// Whether a file name is an XMP sidecar's.
pub fn is_sidecar_name(file_name: &[u8]) -> bool {
    file_name.len() > 4 && file_name[file_name.len() - 4..].eq_ignore_ascii_case(b".xmp")
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> chrono::DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
    }

    const DARKTABLE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<x:xmpmeta xmlns:x="adobe:ns:meta/" x:xmptk="XMP Core 4.4.0-Exiv2">
 <rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">
  <rdf:Description rdf:about=""
    xmlns:exif="http://ns.adobe.com/exif/1.0/"
    xmlns:xmp="http://ns.adobe.com/xap/1.0/"
   exif:DateTimeOriginal="2019:07:04 18:30:05"
   xmp:CreateDate="2020-01-01T00:00:00">
  </rdf:Description>
 </rdf:RDF>
</x:xmpmeta>"#;

    #[test]
    fn attributes_elements_and_any_prefix() {
        let c = xmp_date(DARKTABLE.as_bytes(), CaptureSource::XmpSidecar).unwrap();
        assert_eq!((c.at, c.offset_minutes, c.source), (at(2019, 7, 4, 18, 30, 5), None, CaptureSource::XmpSidecar));

        let lightroom = r#"<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">
          <rdf:Description rdf:about="" xmlns:ps="http://ns.adobe.com/photoshop/1.0/" xmlns:xap="http://ns.adobe.com/xap/1.0/">
            <xap:CreateDate>2021-03-04T05:06:07</xap:CreateDate>
            <ps:DateCreated>2019-07-04T18:30:05.5+02:00</ps:DateCreated>
          </rdf:Description></rdf:RDF></x:xmpmeta>"#;
        let c = xmp_date(lightroom.as_bytes(), CaptureSource::XmpSidecar).unwrap();
        assert_eq!(c.at, at(2019, 7, 4, 16, 30, 5) + chrono::Duration::milliseconds(500), "photoshop:DateCreated wins");
        assert_eq!(c.offset_minutes, Some(120));

        let create_only = DARKTABLE.replace("exif:DateTimeOriginal=\"2019:07:04 18:30:05\"", "");
        assert_eq!(xmp_date(create_only.as_bytes(), CaptureSource::XmpSidecar).unwrap().at, at(2020, 1, 1, 0, 0, 0));
    }

    #[test]
    fn embedded_packets_are_found_in_binary_content() {
        let mut file = vec![0xFF, 0xD8, 0xFF, 0xE1, 0x10, 0x00];
        file.extend_from_slice(
            b"http://ns.adobe.com/xap/1.0/\0<?xpacket begin=\"\xef\xbb\xbf\" id=\"W5M0MpCehiHzreSzNTczkc9d\"?>",
        );
        file.extend_from_slice(DARKTABLE.split_once("?>\n").unwrap().1.as_bytes());
        file.extend_from_slice(b"<?xpacket end=\"w\"?>\xFF\xD9 trailing \x00\x01");
        assert_eq!(embedded_xmp_date(&file).unwrap().source, CaptureSource::XmpEmbedded);
        assert_eq!(embedded_xmp_date(&file).unwrap().at, at(2019, 7, 4, 18, 30, 5));
    }

    #[test]
    fn not_xmp_or_no_date_gives_nothing() {
        assert_eq!(xmp_date(b"not xml at all", CaptureSource::XmpSidecar), None);
        assert_eq!(xmp_date(b"<x:xmpmeta xmlns:x=\"adobe:ns:meta/\"></x:xmpmeta>", CaptureSource::XmpSidecar), None);
        let billion_laughs = r#"<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;">]>
            <x:xmpmeta xmlns:x="adobe:ns:meta/">&lol2;</x:xmpmeta>"#;
        assert_eq!(xmp_date(billion_laughs.as_bytes(), CaptureSource::XmpSidecar), None, "no DTD");
        let unclosed = DARKTABLE.replace("</x:xmpmeta>", "");
        assert_eq!(embedded_xmp_date(unclosed.as_bytes()), None);
        let wrong_namespace = DARKTABLE
            .replace("http://ns.adobe.com/exif/1.0/", "urn:other")
            .replace("xmp:CreateDate=\"2020-01-01T00:00:00\"", "");
        assert_eq!(xmp_date(wrong_namespace.as_bytes(), CaptureSource::XmpSidecar), None, "by namespace, not prefix");
    }

    #[test]
    fn sidecar_names_of_a_file() {
        assert_eq!(sidecar_names(b"IMG_1.CR2"), [b"IMG_1.CR2.xmp".to_vec(), b"IMG_1.xmp".to_vec()]);
        assert_eq!(sidecar_names(b"noext"), [b"noext.xmp".to_vec(), b"noext.xmp".to_vec()]);
        assert!(is_sidecar_name(b"IMG_1.CR2.XMP"));
        assert!(!is_sidecar_name(b".xmp"));
        assert!(!is_sidecar_name(b"IMG_1.jpg"));
    }

    /// A packet nesting more namespace declarations than any writer makes is not parsed (its date is not read);
    /// one with a writer's usual few dozen is.
    #[test]
    fn a_packet_declaring_namespaces_by_the_hundred_is_not_parsed() {
        let nested = |n: usize| {
            let open: String = (0..n).map(|i| format!("<e{i} xmlns:p{i}=\"urn:p{i}\">")).collect();
            let close: String = (0..n).rev().map(|i| format!("</e{i}>")).collect();
            format!(
                r#"<x:xmpmeta xmlns:x="adobe:ns:meta/">{open}<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:Description xmlns:exif="http://ns.adobe.com/exif/1.0/" exif:DateTimeOriginal="2019:07:04 18:30:05"/></rdf:RDF>{close}</x:xmpmeta>"#
            )
        };
        assert!(xmp_date(nested(40).as_bytes(), CaptureSource::XmpSidecar).is_some(), "a writer's few dozen: read");
        let bomb = nested(MAX_NAMESPACE_DECLARATIONS);
        assert!(xmp_date(bomb.as_bytes(), CaptureSource::XmpSidecar).is_none(), "past the limit: not parsed");
    }
}
