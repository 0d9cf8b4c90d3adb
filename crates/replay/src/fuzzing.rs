//! Entry points of the fuzz targets (`fuzz/`) and of the corpus replay test: each takes
//! arbitrary bytes, as a file could hold them, and must never panic. Not an API.

use std::io::Cursor;
use std::path::Path;

use crate::capture::{decode, linktype};
use crate::{dump, ClientsReader, Extractor, Options};

/// A pcap or pcapng file, read to the end and extracted to clients (link layers, IP
/// fragments, TCP reassembly); the clients file written from it reads back whole. Then the
/// bytes as one frame of every link type.
pub fn capture(data: &[u8]) {
    let mut ex = Extractor::new(Options { ports: vec![53, 853, 5353], ..Options::default() });
    if ex.read_capture(data).is_ok() {
        ex.finish();
        let _ = ex.report().render("fuzz.pcap", "fuzz.clients");
        let (_, file) = ex.write(Cursor::new(Vec::new())).expect("writing to memory");
        let file = file.into_inner();
        let reader = ClientsReader::new(&file[..], Path::new("fuzz.clients"), Some(file.len() as u64))
            .expect("a clients file written by the extractor reads back");
        for c in reader {
            c.expect("a clients file written by the extractor reads back whole");
        }
    }
    for lt in [
        linktype::NULL,
        linktype::ETHERNET,
        linktype::RAW,
        linktype::LOOP,
        linktype::LINUX_SLL,
        linktype::IPV4,
        linktype::IPV6,
        linktype::LINUX_SLL2,
    ] {
        let _ = decode(lt, data);
    }
}

/// A `volley.clients/1` file, read client by client and dumped as text.
pub fn clients(data: &[u8]) {
    let name = Path::new("fuzz.clients");
    if let Ok(reader) = ClientsReader::new(data, name, Some(data.len() as u64)) {
        for c in reader {
            if c.is_err() {
                break;
            }
        }
    }
    if let Ok(mut reader) = ClientsReader::new(data, name, None) {
        let _ = dump(&mut reader, &mut std::io::sink());
    }
}
