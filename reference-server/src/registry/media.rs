//! Content identifiers and the small deterministic media files behind seeded records.
//!
//! Seeded assets are not stored on disk: their bytes are a pure function of the seed index (or of the
//! asset CID for derived files such as snapshots and QR images), regenerated when a signed URL is
//! fetched. Uploaded files are stored in the media directory under their CID.

use sha2::{Digest, Sha256};

/// A tiny 16x16 baseline JPEG, made once with Pillow; every generated JPEG is this image plus a COM
/// segment naming what it stands for, so each generated file has its own bytes and CID.
const BASE_JPEG: &[u8] = include_bytes!("assets/base.jpg");

/// SHA-256 of `bytes`, lower-case hex (the registry's `proof_hash`).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// CIDv1 of `bytes`: multibase `b` (base32 lower, no padding), raw codec (0x55), sha2-256 multihash.
///
/// ```
/// # use reference_server::registry::cid_v1_raw;
/// // The CID of the empty file, as `ipfs add --cid-version 1 --raw-leaves` prints it.
/// assert_eq!(cid_v1_raw(b""), "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku");
/// ```
pub fn cid_v1_raw(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut raw = Vec::with_capacity(36);
    raw.extend_from_slice(&[0x01, 0x55, 0x12, 0x20]);
    raw.extend_from_slice(&digest);
    let mut s = String::with_capacity(60);
    s.push('b');
    s.push_str(
        &data_encoding::BASE32_NOPAD
            .encode(&raw)
            .to_ascii_lowercase(),
    );
    s
}

/// A JPEG whose pixels are the base image and whose COM segment carries `label`.
pub fn jpeg(label: &str) -> Vec<u8> {
    let label = &label.as_bytes()[..label.len().min(60_000)];
    let mut out = Vec::with_capacity(BASE_JPEG.len() + label.len() + 4);
    out.extend_from_slice(&BASE_JPEG[..2]); // SOI
    out.extend_from_slice(&[0xFF, 0xFE]);
    out.extend_from_slice(&((label.len() + 2) as u16).to_be_bytes());
    out.extend_from_slice(label);
    out.extend_from_slice(&BASE_JPEG[2..]);
    out
}

/// An 8-bit RGB PNG of `size`x`size` pixels, a colour pattern derived from `label`, with a `tEXt`
/// chunk carrying `label`. Uncompressed (stored deflate blocks): tiny images, no compressor needed.
pub fn png(label: &str, size: u32) -> Vec<u8> {
    let seed = Sha256::digest(label.as_bytes());
    let size = size.clamp(1, 64);
    let mut raw = Vec::with_capacity(((size * 3 + 1) * size) as usize);
    for y in 0..size {
        raw.push(0); // filter: none
        for x in 0..size {
            // A checker of two colours from the label hash: looks like a (non-scannable) code.
            let bit = seed[((x / 4 + y / 4 * 16) % 32) as usize] >> ((x + y) % 8) & 1;
            let c = if bit == 1 { &seed[0..3] } else { &seed[3..6] };
            raw.extend_from_slice(c);
        }
    }
    let mut out = Vec::with_capacity(raw.len() + 128);
    out.extend_from_slice(b"\x89PNG\r\n\x1a\n");
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&size.to_be_bytes());
    ihdr.extend_from_slice(&size.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    chunk(&mut out, b"IHDR", &ihdr);
    let mut text = b"Comment\0".to_vec();
    text.extend_from_slice(label.as_bytes());
    chunk(&mut out, b"tEXt", &text);
    chunk(&mut out, b"IDAT", &zlib_stored(&raw));
    chunk(&mut out, b"IEND", &[]);
    out
}

/// A minimal ISO-BMFF (MP4) container: `ftyp`, a `free` box carrying `label`, an empty `mdat`.
/// Well-formed boxes with no media track: a placeholder for video assets, not a playable video.
pub fn mp4(label: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let ftyp: &[u8] = b"isom\0\0\x02\0isomiso2mp41";
    out.extend_from_slice(&((ftyp.len() + 8) as u32).to_be_bytes());
    out.extend_from_slice(b"ftyp");
    out.extend_from_slice(ftyp);
    out.extend_from_slice(&((label.len() + 8) as u32).to_be_bytes());
    out.extend_from_slice(b"free");
    out.extend_from_slice(label.as_bytes());
    out.extend_from_slice(&8u32.to_be_bytes());
    out.extend_from_slice(b"mdat");
    out
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let mut blocks = data.chunks(65_535).peekable();
    if blocks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xFF, 0xFF]);
    }
    while let Some(block) = blocks.next() {
        out.push(u8::from(blocks.peek().is_none()));
        let len = block.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in data {
        a = (a + u32::from(byte)) % 65_521;
        b = (b + a) % 65_521;
    }
    out.extend_from_slice(&((b << 16) | a).to_be_bytes());
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A derived file served under `/media/g/<kind>/<name>`: generated from the name alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Derived {
    /// Still JPEG snapshot of the asset.
    Snapshot,
    /// Small JPEG thumbnail.
    Thumbnail,
    /// JPEG sharable copy.
    SharableCopy,
    /// PNG certificate image.
    Certified,
    /// PNG certificate thumbnail.
    CertifiedThumbnail,
    /// PNG code image pointing at the verification page (a deterministic pattern, not a real QR code).
    QrCode,
    /// PNG profile picture of an account.
    Avatar,
    /// PNG profile picture thumbnail.
    AvatarThumbnail,
}

impl Derived {
    const ALL: [(Derived, &'static str, &'static str); 8] = [
        (Derived::Snapshot, "snapshot", "jpg"),
        (Derived::Thumbnail, "thumbnail", "jpg"),
        (Derived::SharableCopy, "copy", "jpg"),
        (Derived::Certified, "certified", "png"),
        (Derived::CertifiedThumbnail, "certified-thumbnail", "png"),
        (Derived::QrCode, "qrcode", "png"),
        (Derived::Avatar, "avatar", "png"),
        (Derived::AvatarThumbnail, "avatar-thumbnail", "png"),
    ];

    /// The URL path of this derived file for `name` (a CID or an account handle).
    pub fn path(self, name: &str) -> String {
        let (_, kind, ext) = Self::ALL
            .iter()
            .find(|(d, ..)| *d == self)
            .copied()
            .unwrap_or(Self::ALL[0]);
        format!("/media/g/{kind}/{name}.{ext}")
    }

    /// The bytes and MIME type served for a path tail `<kind>/<name>.<ext>`, or `None` if unknown.
    pub fn generate(tail: &str) -> Option<(&'static str, Vec<u8>)> {
        let (kind, file) = tail.split_once('/')?;
        let (name, ext) = file.rsplit_once('.')?;
        let (d, _, want_ext) = Self::ALL.iter().find(|(_, k, _)| *k == kind).copied()?;
        if ext != want_ext || name.is_empty() || name.len() > 128 {
            return None;
        }
        let label = format!("{kind}:{name}");
        Some(match d {
            Derived::Snapshot | Derived::Thumbnail | Derived::SharableCopy => {
                ("image/jpeg", jpeg(&label))
            }
            Derived::Certified | Derived::QrCode | Derived::Avatar => {
                ("image/png", png(&label, 32))
            }
            Derived::CertifiedThumbnail | Derived::AvatarThumbnail => {
                ("image/png", png(&label, 12))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cid_of_known_bytes() {
        // `echo -n hello | ipfs add --cid-version 1 --raw-leaves -Q`
        assert_eq!(
            cid_v1_raw(b"hello"),
            "bafkreibm6jg3ux5qumhcn2b3flc3tyu6dmlb4xa7u5bf44yegnrjhc4yeq"
        );
    }

    #[test]
    fn generated_files_have_their_magic_and_differ() {
        let a = jpeg("a");
        assert_eq!(&a[..4], &[0xFF, 0xD8, 0xFF, 0xFE]);
        assert!(a.ends_with(&[0xFF, 0xD9]));
        assert_ne!(jpeg("a"), jpeg("b"));
        let p = png("x", 8);
        assert_eq!(&p[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(&mp4("v")[4..8], b"ftyp");
        let (mime, bytes) = Derived::generate("qrcode/bafy.png").unwrap();
        assert_eq!(mime, "image/png");
        assert_eq!(bytes, png("qrcode:bafy", 32));
        assert!(Derived::generate("qrcode/bafy.jpg").is_none());
        assert!(Derived::generate("nope/bafy.png").is_none());
        assert_eq!(Derived::QrCode.path("c"), "/media/g/qrcode/c.png");
    }
}
