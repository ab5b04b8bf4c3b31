//! Opens a log stream, transparently decompressing gzip (rotated `.gz` logs) by its magic bytes.

use std::io::{BufRead, BufReader, Cursor, Read};

use flate2::read::MultiGzDecoder;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const BUF: usize = 256 << 10;

/// Wraps `reader` in a buffered reader, decompressing it when it starts with the gzip magic
/// bytes (concatenated gzip members, as `logrotate` and `cat a.gz b.gz` produce, are all read).
///
/// # Errors
/// Reading the first two bytes failed.
pub fn open_reader<R: Read + 'static>(reader: R) -> std::io::Result<Box<dyn BufRead>> {
    open_reader_gz(reader).map(|(r, _)| r)
}

/// [`open_reader`], also saying whether the input is gzip (so that a caller can report where
/// in the compressed input a read failed).
///
/// # Errors
/// Reading the first two bytes failed.
pub fn open_reader_gz<R: Read + 'static>(
    mut reader: R,
) -> std::io::Result<(Box<dyn BufRead>, bool)> {
    let mut magic = [0u8; 2];
    let mut n = 0;
    while n < magic.len() {
        match reader.read(&mut magic[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let head = Cursor::new(magic).take(n as u64);
    let joined = head.chain(reader);
    if n == 2 && magic == GZIP_MAGIC {
        Ok((
            Box::new(BufReader::with_capacity(BUF, MultiGzDecoder::new(joined))),
            true,
        ))
    } else {
        Ok((Box::new(BufReader::with_capacity(BUF, joined)), false))
    }
}

/// True when `head` starts with the gzip magic bytes.
pub fn is_gzip(head: &[u8]) -> bool {
    head.starts_with(&GZIP_MAGIC)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use flate2::Compression;
    use flate2::write::GzEncoder;
    use std::io::Write;

    #[test]
    fn plain_and_gzip_read_the_same() {
        let text = b"line one\ndial tcp 10.0.0.1:80: connect: connection refused\n".to_vec();
        let mut plain = String::new();
        open_reader(Cursor::new(text.clone()))
            .unwrap()
            .read_to_string(&mut plain)
            .unwrap();
        assert_eq!(plain.as_bytes(), &text[..]);

        let mut enc = GzEncoder::new(Vec::new(), Compression::fast());
        enc.write_all(&text).unwrap();
        let gz = enc.finish().unwrap();
        assert!(is_gzip(&gz));
        let mut unzipped = String::new();
        open_reader(Cursor::new(gz))
            .unwrap()
            .read_to_string(&mut unzipped)
            .unwrap();
        assert_eq!(unzipped.as_bytes(), &text[..]);
    }

    #[test]
    fn tiny_inputs() {
        let mut s = String::new();
        open_reader(Cursor::new(b"x".to_vec()))
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "x");
    }
}
