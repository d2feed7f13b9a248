//! Almanac Worker's media pipeline: content hashing, type detection, metadata, and proxies.
//!
//! Stills decode once, downscaled during decode where the format allows (libjpeg-turbo's DCT scaling), are
//! turned upright, and give a preview (1920 px, JPEG q85), a thumbnail made from the preview (300 px, q75) and
//! a BlurHash made from the thumbnail. HEIC is decoded with libheif's `heif-convert` tool (Debian's libheif
//! 1.15 is older than the Rust bindings accept; see `docs/media.md` in the repository). Videos go through `ffprobe` and `ffmpeg`,
//! each run in a process group of its own, with a timeout, killed with its whole tree on cancellation, and killed
//! by the kernel when the Worker dies (even by `kill -9`).
//!
//! **Architecture invariant:** nothing here writes outside the destination folder it is given, and every file
//! it writes appears under its final name only when complete (temporary name, then rename). Originals are
//! only read.

mod answers;
mod apple;
mod budget;
mod cmyk;
mod dates;
mod decode_guard;
mod detect;
mod error;
mod exif_facts;
mod hash;
mod heif_orientation;
mod heif_size;
mod jpeg_scans;
mod originals;
pub mod priority;
mod proxy_folder;
mod proxy_root;
mod raw;
mod read;
mod still;
mod text;
mod tool;
mod tool_output;
mod video;
mod writers;
mod xmp;

#[cfg(feature = "fixtures")]
pub mod fixtures;
#[cfg(feature = "fixtures")]
pub mod scratch_volume;

pub use answers::{Answering, Answers, OnReturn};
pub use apple::{AppleNote, apple_note, read_apple_note};
pub use budget::{PixelBudget, PixelReservation, full_decode_pixels, video_decode_pixels};
pub use dates::date_in_file_name;
pub use detect::{EXTENSIONS, MAGIC_LEN, MediaFormat, RawFormat, detect_format, is_media_name};
pub use error::MediaError;
pub use exif_facts::{ExifFacts, read_exif, read_still_facts};
pub use hash::{HashedBytes, hash_bytes, hash_file, hash_reader};
pub use originals::{
    Entry, EntryKind, Listing, OpenError, Original, ROOT_ANSWERS_WITHIN, Removal, RootFolder, UNKNOWN_MTIME,
    Unexamined, folder_identity, identity, join_beneath, lies_within, overlap_hidden_from_paths, same_folder,
    same_tree, split_parent, trees_overlap,
};
pub use priority::{IoPriority, Priority, gently, set_priority};
pub use proxy_folder::{ProxyFolder, make_proxy_folder};
pub use proxy_root::{check_proxy_folders, check_proxy_path, check_proxy_root, effective_user};
pub use raw::raw_preview;
pub use read::{Content, MAX_STILL_BYTES, ReadError, ReadOriginal, read_original, read_sidecar};
pub use still::{
    DEFAULT_MAX_PIXELS, PREVIEW_LONG_SIDE, StillProxies, THUMBNAIL_LONG_SIDE, heic_to_jpeg, make_still_proxies,
};
pub use tool::ToolLimits;
pub use video::{VideoFacts, VideoProxies, make_video_proxies, probe_video};
pub use writers::{Writers, writers};
pub use xmp::{MAX_XMP_BYTES, embedded_xmp_date, is_sidecar_name, sidecar_names, xmp_date};
