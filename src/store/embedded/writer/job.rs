//! One queued write of the writer thread, and its caller's answer.

use redb::WriteTransaction;

use crate::store::StoreError;

/// One queued write: runs inside the batch's transaction (maybe again, if
/// a batch-mate failed), then is answered once with the batch's outcome.
pub(in crate::store::embedded) trait Pending: Send {
    /// Runs the operation in `txn`; whether it changed anything. An
    /// operation that failed once is not run again (`Ok(false)`).
    fn run(&mut self, txn: &WriteTransaction) -> Result<bool, StoreError>;
    /// Answers the caller: its own error if it failed, else `Ok` once the
    /// commit holding the write is durable, or the batch's error.
    fn answer(self: Box<Self>, outcome: Result<(), StoreError>);
}

/// A [`Pending`] with its caller's reply channel.
pub(in crate::store::embedded) struct Job<T, F> {
    op: F,
    /// The last run's result: the value (valid once committed) or the
    /// operation's own error.
    result: Option<Result<T, StoreError>>,
    reply: tokio::sync::oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Job<T, F> {
    /// A job answering on `reply`.
    pub(in crate::store::embedded) fn new(
        op: F,
        reply: tokio::sync::oneshot::Sender<Result<T, StoreError>>,
    ) -> Self {
        Self {
            op,
            result: None,
            reply,
        }
    }
}

impl<T, F> Pending for Job<T, F>
where
    T: Send,
    F: FnMut(&WriteTransaction) -> Result<(T, bool), StoreError> + Send,
{
    fn run(&mut self, txn: &WriteTransaction) -> Result<bool, StoreError> {
        if let Some(Err(_)) = self.result {
            return Ok(false);
        }
        match (self.op)(txn) {
            Ok((value, changed)) => {
                self.result = Some(Ok(value));
                Ok(changed)
            }
            Err(error) => {
                self.result = Some(Err(error.clone()));
                Err(error)
            }
        }
    }

    fn answer(self: Box<Self>, outcome: Result<(), StoreError>) {
        let Self { result, reply, .. } = *self;
        let answer = match result {
            Some(Err(own)) => Err(own),
            Some(Ok(value)) => outcome.map(|()| value),
            None => Err(outcome.err().unwrap_or_else(|| {
                StoreError::Backend("embedded write answered before it ran".into())
            })),
        };
        // A caller that stopped waiting (timed out) needs no answer.
        drop(reply.send(answer));
    }
}
