//! Every problem in a daemon's settings, found in one pass and reported together: an operator
//! who fixes one setting and restarts should not meet the next one only then.

use std::fmt;

/// The problems found while settling a daemon's settings, in the order they were found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problems<E>(Vec<E>);

impl<E> Default for Problems<E> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<E> Problems<E> {
    /// No problem yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a problem.
    pub fn push(&mut self, problem: impl Into<E>) {
        self.0.push(problem.into());
    }

    /// The value of a check that passed; a failed check's problem is recorded and `None`
    /// returned, so the caller goes on to the next setting.
    pub fn take<T, F: Into<E>>(&mut self, checked: Result<T, F>) -> Option<T> {
        checked.map_err(|problem| self.push(problem)).ok()
    }

    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The problems, in the order they were found.
    pub fn as_slice(&self) -> &[E] {
        &self.0
    }

    /// The problems, in the order they were found.
    pub fn into_vec(self) -> Vec<E> {
        self.0
    }

    /// `Ok` when nothing was found, else every problem.
    pub fn into_result(self) -> Result<(), Self> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(self)
        }
    }
}

/// One problem reads as itself; several are counted and listed on one line, so the journal
/// keeps them in one entry.
impl<E: fmt::Display> fmt::Display for Problems<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [] => f.write_str("no problem"),
            [one] => write!(f, "{one}"),
            many => {
                write!(f, "{} problems: ", many.len())?;
                for (i, problem) in many.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{problem}")?;
                }
                Ok(())
            }
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for Problems<E> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collects_in_order_and_reads_as_one_line() {
        let mut problems: Problems<String> = Problems::new();
        assert_eq!(problems.take(Ok::<u8, String>(1)), Some(1));
        assert!(problems.clone().into_result().is_ok());
        assert_eq!(problems.take(Err::<u8, _>("a is bad")), None);
        assert_eq!(problems.to_string(), "a is bad");
        problems.push("b is missing");
        assert_eq!(problems.as_slice(), ["a is bad", "b is missing"]);
        assert_eq!(
            problems.into_result().unwrap_err().to_string(),
            "2 problems: a is bad; b is missing"
        );
    }
}
