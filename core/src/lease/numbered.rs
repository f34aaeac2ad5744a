//! A vector whose places are numbers handed out and let go: what the fleet's slots and the
//! index's terms are kept in.

use std::ops::{Index, IndexMut};

/// Items by number. A number let go is handed out again before the vector grows, so numbers
/// stay dense however many items come and go; what a place held stays until it is reused,
/// so an owner clears what it must not keep before letting a number go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Numbered<T> {
    items: Vec<T>,
    free: Vec<usize>,
}

impl<T> Default for Numbered<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Numbered<T> {
    /// Puts `item` in a free place, or a new one, and returns its number.
    pub(super) fn add(&mut self, item: T) -> usize {
        match self.free.pop() {
            Some(number) => {
                self.items[number] = item;
                number
            }
            None => {
                self.items.push(item);
                self.items.len() - 1
            }
        }
    }

    /// Lets `number` go, to be handed out again. Nothing may use it after that.
    pub(super) fn let_go(&mut self, number: usize) {
        self.free.push(number);
    }
}

impl<T> Index<usize> for Numbered<T> {
    type Output = T;

    fn index(&self, number: usize) -> &T {
        &self.items[number]
    }
}

impl<T> IndexMut<usize> for Numbered<T> {
    fn index_mut(&mut self, number: usize) -> &mut T {
        &mut self.items[number]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_let_go_is_handed_out_before_the_vector_grows() {
        let mut numbered = Numbered::default();
        assert_eq!(
            (numbered.add("a"), numbered.add("b"), numbered.add("c")),
            (0, 1, 2)
        );
        numbered.let_go(1);
        assert_eq!(numbered.add("d"), 1);
        assert_eq!(numbered.add("e"), 3);
        assert_eq!(
            [numbered[0], numbered[1], numbered[2], numbered[3]],
            ["a", "d", "c", "e"]
        );
    }
}
