//! When a change to a watched rule file is taken: once it reads the same twice in a row.
//!
//! A file written in place (`cat > rules.yaml`, most editors' plain save) can be read empty or
//! half written between two writes; taking that read would log and count a failed reload
//! before the whole file loads. A file replaced by a rename is never seen half, and is taken
//! one read later.

/// The last version of a watched file taken, and a change seen once and not yet taken. A
/// version is whatever a read of the file gives: its contents, or its length and mtime.
///
/// ```
/// use sluicegate_rules::Settled;
///
/// let mut file = Settled::new(Some("v1"));
/// assert_eq!(file.observe("v1"), None); // unchanged
/// assert_eq!(file.observe(""), None); // read while being written: seen once
/// assert_eq!(file.observe("v2"), None); // written: seen once
/// assert_eq!(file.observe("v2"), Some(&"v2")); // the same twice in a row: taken
/// ```
#[derive(Debug)]
pub struct Settled<T> {
    taken: Option<T>,
    seen_once: Option<T>,
}

impl<T: PartialEq> Settled<T> {
    /// Starts from `taken`, the version in force (none: the file could not be read).
    pub fn new(taken: Option<T>) -> Settled<T> {
        Settled {
            taken,
            seen_once: None,
        }
    }

    /// Notes one read of the file; returns it when it is a change to take: not the version
    /// taken last, and the same as the read before.
    pub fn observe(&mut self, read: T) -> Option<&T> {
        if self.taken.as_ref() == Some(&read) {
            self.seen_once = None;
            return None;
        }
        if self.seen_once.as_ref() != Some(&read) {
            self.seen_once = Some(read);
            return None;
        }
        self.seen_once = None;
        self.taken = Some(read);
        self.taken.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::Settled;

    #[test]
    fn a_change_is_taken_on_its_second_read() {
        let mut file = Settled::new(Some(b"v1".to_vec()));
        assert_eq!(file.observe(b"v1".to_vec()), None);
        assert_eq!(file.observe(b"v2".to_vec()), None);
        assert_eq!(file.observe(b"v2".to_vec()), Some(&b"v2".to_vec()));
        // Taken once: the same contents again are no change.
        assert_eq!(file.observe(b"v2".to_vec()), None);
        assert_eq!(file.observe(b"v2".to_vec()), None);
    }

    #[test]
    fn a_file_read_while_it_is_written_is_not_taken() {
        let mut file = Settled::new(Some(b"v1".to_vec()));
        // Read empty, then half written, then whole: only the whole file, read twice, is taken.
        assert_eq!(file.observe(Vec::new()), None);
        assert_eq!(file.observe(b"v2 ha".to_vec()), None);
        assert_eq!(file.observe(b"v2 whole".to_vec()), None);
        assert_eq!(
            file.observe(b"v2 whole".to_vec()),
            Some(&b"v2 whole".to_vec())
        );
    }

    #[test]
    fn a_change_undone_before_it_settled_is_not_taken() {
        let mut file = Settled::new(Some(b"v1".to_vec()));
        assert_eq!(file.observe(b"v2".to_vec()), None);
        assert_eq!(file.observe(b"v1".to_vec()), None);
        // The change seen once is forgotten: seeing it again starts over.
        assert_eq!(file.observe(b"v2".to_vec()), None);
        assert_eq!(file.observe(b"v2".to_vec()), Some(&b"v2".to_vec()));
    }

    #[test]
    fn a_file_unreadable_at_start_is_taken_once_it_settles() {
        let mut file = Settled::new(None);
        assert_eq!(file.observe(b"v1".to_vec()), None);
        assert_eq!(file.observe(b"v1".to_vec()), Some(&b"v1".to_vec()));
    }
}
