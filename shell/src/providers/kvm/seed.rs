//! The NoCloud seed of a VM: cloud-init's `user-data`, `meta-data` and (for static
//! addresses) `network-config`, in an ISO 9660 image labelled `cidata`, which cloud-init's
//! NoCloud datasource finds by its label.
//!
//! The image is written here rather than by genisoimage or xorriso, so that a libvirt host
//! needs no tool of ours: a seed is three small files in one directory, and the plainest ISO
//! 9660 (no Rock Ridge, no Joliet) holds them. Linux's isofs shows the names `USER-DATA;1`
//! as `user-data`, which is what cloud-init reads.

/// The bytes of one sector.
const SECTOR: usize = 2048;
/// Sectors 0-15 are the system area; the volume descriptors start at 16.
const PVD_SECTOR: usize = 16;
const TERMINATOR_SECTOR: usize = 17;
const L_PATH_TABLE_SECTOR: usize = 18;
const M_PATH_TABLE_SECTOR: usize = 19;
const ROOT_SECTOR: usize = 20;
const FIRST_FILE_SECTOR: usize = 21;
/// A fixed recording time (2026-01-01T00:00:00Z): the same seed gives the same bytes.
const RECORDED: [u8; 7] = [126, 1, 1, 0, 0, 0, 0];

/// What cloud-init gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seed {
    /// The `user-data` file: the resolved cloud-init.
    pub user_data: String,
    /// The `meta-data` file: instance-id and hostname.
    pub meta_data: String,
    /// The `network-config` file, when the guest's address is static.
    pub network_config: Option<String>,
}

impl Seed {
    /// The seed of the VM `instance` (its domain name: the instance-id, and the hostname).
    pub fn new(instance: &str, user_data: String, network_config: Option<String>) -> Self {
        Self {
            user_data,
            meta_data: format!("instance-id: {instance}\nlocal-hostname: {instance}\n"),
            network_config,
        }
    }

    /// The files in the ISO's root directory, sorted by name as ISO 9660 requires.
    fn files(&self) -> Vec<(&'static str, &[u8])> {
        let mut files = vec![("META-DATA;1", self.meta_data.as_bytes())];
        if let Some(network) = &self.network_config {
            files.push(("NETWORK-CONFIG;1", network.as_bytes()));
        }
        files.push(("USER-DATA;1", self.user_data.as_bytes()));
        files
    }

    /// The ISO 9660 image, a whole number of sectors.
    pub fn iso(&self) -> Vec<u8> {
        let files = self.files();
        let mut extents = Vec::with_capacity(files.len());
        let mut next = FIRST_FILE_SECTOR;
        for (_, data) in &files {
            extents.push(next);
            next += data.len().div_ceil(SECTOR).max(1);
        }
        let total_sectors = next;
        let mut image = vec![0u8; total_sectors * SECTOR];

        let mut root = Vec::new();
        root.extend(directory_record(&[0], ROOT_SECTOR, SECTOR, true));
        root.extend(directory_record(&[1], ROOT_SECTOR, SECTOR, true));
        for ((name, data), extent) in files.iter().zip(&extents) {
            root.extend(directory_record(
                name.as_bytes(),
                *extent,
                data.len(),
                false,
            ));
            let at = extent * SECTOR;
            image[at..at + data.len()].copy_from_slice(data);
        }
        debug_assert!(root.len() <= SECTOR, "a seed's directory fits one sector");
        let at = ROOT_SECTOR * SECTOR;
        image[at..at + root.len()].copy_from_slice(&root);

        image[sector(PVD_SECTOR)].copy_from_slice(&primary_volume_descriptor(total_sectors));
        let terminator = &mut image[sector(TERMINATOR_SECTOR)];
        terminator[0] = 255;
        terminator[1..6].copy_from_slice(b"CD001");
        terminator[6] = 1;
        // The path table of a single (root) directory: identifier length 1, extent, parent 1.
        let l_table = &mut image[sector(L_PATH_TABLE_SECTOR)];
        l_table[0] = 1;
        l_table[2..6].copy_from_slice(&(ROOT_SECTOR as u32).to_le_bytes());
        l_table[6..8].copy_from_slice(&1u16.to_le_bytes());
        let m_table = &mut image[sector(M_PATH_TABLE_SECTOR)];
        m_table[0] = 1;
        m_table[2..6].copy_from_slice(&(ROOT_SECTOR as u32).to_be_bytes());
        m_table[6..8].copy_from_slice(&1u16.to_be_bytes());
        image
    }
}

fn sector(n: usize) -> std::ops::Range<usize> {
    n * SECTOR..(n + 1) * SECTOR
}

/// ISO 9660's "both-endian" numbers: little-endian, then big-endian.
fn both32(n: usize) -> [u8; 8] {
    let n = n as u32;
    let mut out = [0; 8];
    out[..4].copy_from_slice(&n.to_le_bytes());
    out[4..].copy_from_slice(&n.to_be_bytes());
    out
}

fn both16(n: u16) -> [u8; 4] {
    let mut out = [0; 4];
    out[..2].copy_from_slice(&n.to_le_bytes());
    out[2..].copy_from_slice(&n.to_be_bytes());
    out
}

fn directory_record(name: &[u8], extent: usize, size: usize, directory: bool) -> Vec<u8> {
    let length = 33 + name.len() + (name.len() + 1) % 2;
    let mut record = vec![0u8; length];
    record[0] = length as u8;
    record[2..10].copy_from_slice(&both32(extent));
    record[10..18].copy_from_slice(&both32(size));
    record[18..25].copy_from_slice(&RECORDED);
    record[25] = if directory { 2 } else { 0 };
    record[28..32].copy_from_slice(&both16(1));
    record[32] = name.len() as u8;
    record[33..33 + name.len()].copy_from_slice(name);
    record
}

fn primary_volume_descriptor(total_sectors: usize) -> Vec<u8> {
    let mut pvd = vec![0u8; SECTOR];
    pvd[0] = 1;
    pvd[1..6].copy_from_slice(b"CD001");
    pvd[6] = 1;
    pvd[8..40].fill(b' ');
    // The volume label cloud-init looks for.
    pvd[40..72].fill(b' ');
    pvd[40..46].copy_from_slice(b"cidata");
    pvd[80..88].copy_from_slice(&both32(total_sectors));
    pvd[120..124].copy_from_slice(&both16(1));
    pvd[124..128].copy_from_slice(&both16(1));
    pvd[128..132].copy_from_slice(&both16(SECTOR as u16));
    pvd[132..140].copy_from_slice(&both32(10));
    pvd[140..144].copy_from_slice(&(L_PATH_TABLE_SECTOR as u32).to_le_bytes());
    pvd[148..152].copy_from_slice(&(M_PATH_TABLE_SECTOR as u32).to_be_bytes());
    pvd[156..190].copy_from_slice(&directory_record(&[0], ROOT_SECTOR, SECTOR, true));
    // Volume set, publisher, preparer, application, copyright, abstract, bibliographic ids.
    pvd[190..813].fill(b' ');
    // Creation, modification, expiration, effective times: "not specified".
    for start in [813, 830, 847, 864] {
        pvd[start..start + 16].fill(b'0');
    }
    pvd[881] = 1;
    pvd
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads an ISO 9660 image the way a reader does: the label from the primary volume
    /// descriptor, then the root directory's files through their records.
    fn read(image: &[u8]) -> (String, Vec<(String, Vec<u8>)>) {
        let pvd = &image[sector(PVD_SECTOR)];
        assert_eq!(&pvd[1..6], b"CD001");
        assert_eq!(image[sector(TERMINATOR_SECTOR)][0], 255);
        let le32 = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
        let be32 = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
        assert_eq!(le32(&pvd[80..]) * SECTOR, image.len());
        assert_eq!(le32(&pvd[80..]), be32(&pvd[84..]));
        let label = String::from_utf8(pvd[40..72].to_vec()).unwrap();
        let root = &pvd[156..190];
        let (extent, size) = (le32(&root[2..]), le32(&root[10..]));
        let directory = &image[extent * SECTOR..extent * SECTOR + size];
        let mut files = Vec::new();
        let mut at = 0;
        while at < directory.len() && directory[at] != 0 {
            let record = &directory[at..at + directory[at] as usize];
            let name = &record[33..33 + record[32] as usize];
            if record[25] & 2 == 0 {
                let (extent, size) = (le32(&record[2..]), le32(&record[10..]));
                assert_eq!((extent, size), (be32(&record[6..]), be32(&record[14..])));
                let data = image[extent * SECTOR..extent * SECTOR + size].to_vec();
                files.push((String::from_utf8(name.to_vec()).unwrap(), data));
            }
            at += record.len();
        }
        (label.trim_end().to_owned(), files)
    }

    #[test]
    fn a_seed_is_an_iso_labelled_cidata_with_its_files() {
        let big = "#cloud-config\n".to_owned() + &"# padding\n".repeat(500);
        let seed = Seed::new("proxy-abc", big.clone(), None);
        let (label, files) = read(&seed.iso());
        assert_eq!(label, "cidata");
        assert_eq!(
            files,
            [
                (
                    "META-DATA;1".to_owned(),
                    b"instance-id: proxy-abc\nlocal-hostname: proxy-abc\n".to_vec()
                ),
                ("USER-DATA;1".to_owned(), big.into_bytes()),
            ]
        );
    }

    #[test]
    fn a_static_seed_carries_its_network_config() {
        let seed = Seed::new("p", "#cloud-config\n".into(), Some("version: 2\n".into()));
        let (_, files) = read(&seed.iso());
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["META-DATA;1", "NETWORK-CONFIG;1", "USER-DATA;1"]);
        assert_eq!(files[1].1, b"version: 2\n");
        assert_eq!(seed.iso(), seed.iso(), "the same seed gives the same bytes");
    }
}
