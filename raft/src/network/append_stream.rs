//! The streamed append (`StreamAppend`, a bidi stream): openraft's pipelined
//! AppendEntries requests go out on one stream, with the link-fault hook
//! applied to each, and the peer's answers come back in order, each owed
//! within the deadline once its request is sent.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::{Stream, StreamExt};
use openraft::base::{BoxFuture, BoxStream};
use openraft::errors::{NetworkError, RPCError};
use openraft::network::RPCOption;
use openraft::raft::{AppendEntriesRequest, StreamAppendResult};
use openraft::{OptionalSend, RPCTypes};
use palisade_proto::peer::PeerMessage;
use tokio::sync::{oneshot, watch};
use tonic::Status;

use super::channels::link_verdict;
use super::client::{Peer, PeerClient};
use super::wire::{StreamAppendReply, encode};
use crate::hooks::{LinkFaults, LinkVerdict, PeerRpc};
use crate::types::{NodeId, TypeConfig};

/// The shortest time a streamed append's answer is owed in. openraft
/// offers the heartbeat interval's soft TTL (¾ of it, 37.5 ms at the
/// 50 ms default), but a loaded follower's answer includes its fsync, and
/// each missed deadline restarts the stream: a heartbeat short enough for
/// a fast failover must not make streams time out under load. (Heartbeats
/// keep their own, shorter deadline: a late one only logs.)
pub const STREAM_APPEND_DEADLINE_MIN: Duration = Duration::from_millis(75);

/// What openraft's `RaftNetworkV2::stream_append` returns: a future that
/// opens the stream, then the peer's answers in order.
type StreamAppendFuture<'s> = BoxFuture<
    's,
    Result<
        BoxStream<'s, Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>>,
        RPCError<TypeConfig>,
    >,
>;

impl PeerClient {
    /// openraft's `RaftNetworkV2::stream_append` for this target.
    pub(super) fn start_append_stream<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> StreamAppendFuture<'s>
    where
        S: Stream<Item = AppendEntriesRequest<TypeConfig>> + OptionalSend + Unpin + 'static,
    {
        Box::pin(async move {
            // openraft waits out its backoff (after the peer was unreachable)
            // while producing the next request. Take the first request before
            // connecting, so that a peer that refuses connections is retried
            // after the backoff; connecting first would fail before the
            // request stream is ever polled, and replication would retry in a
            // hot loop for as long as the peer is down.
            let mut input = input;
            let Some(first) = input.next().await else {
                return Ok(Box::pin(futures::stream::empty()) as BoxStream<'s, _>);
            };
            // The request side ends as soon as openraft lets go of the
            // response side. hyper keeps polling a request body after its
            // response body was dropped (it only resets the stream when the
            // response future itself is cancelled), and every poll runs
            // openraft's request generator, whose state (what to send next)
            // is shared with the NEXT session to this peer. An abandoned
            // stream left running would keep pulling entries for the old
            // session, advance the new session's position past what the
            // peer received on the new stream, and keep reading (and after
            // a purge, re-reading an empty, purged range every 10 ms) for as
            // long as the connection lives: the "stuck follower" of issue 13.
            let (abandoned_tx, abandoned_rx) = oneshot::channel::<()>();
            let input = futures::stream::once(futures::future::ready(first))
                .chain(input)
                .take_until(abandoned_rx);
            let deadline = option.soft_ttl().max(STREAM_APPEND_DEADLINE_MIN);
            let mut client = self.client()?;
            if let LinkVerdict::Drop | LinkVerdict::DropReply =
                self.verdict(PeerRpc::StreamAppend, deadline).await?
            {
                return Err(RPCError::Unreachable(
                    self.peer.unreachable("link fault: stream cut"),
                ));
            }

            // The request side counts what it hands to the transport, so the
            // response side knows when an answer is owed (and its deadline
            // runs) and when the peer is merely idle.
            let (progress_tx, progress_rx) = watch::channel(RequestProgress::default());
            let progress_tx = Arc::new(progress_tx);
            let counter = Arc::clone(&progress_tx);
            let peer = self.peer.clone();
            let cluster_level = self.cluster_level.clone();
            // Link faults (tests and chaos only): each request may be delayed,
            // or cut the stream (it and every later one are not sent, and the
            // response side reports the peer unreachable).
            let gate = Arc::new(StreamGate {
                link_faults: self.link_faults.clone(),
                local: self.peer.local,
                target: self.peer.target,
                cut: AtomicBool::new(false),
                progress: Arc::clone(&progress_tx),
            });
            let judge = Arc::clone(&gate);
            let judged = input.then(move |request| {
                let verdict = judge.verdict();
                async move {
                    if let LinkVerdict::Delay(delay) = verdict {
                        tokio::time::sleep(delay).await;
                    }
                    (verdict, request)
                }
            });
            let requests = tokio_stream::StreamExt::map_while(judged, move |(verdict, request)| {
                gate.admit(verdict, request)
            })
            .map(move |request| {
                counter.send_modify(|progress| progress.sent += 1);
                peer.message(encode(&request, cluster_level.peer_encoding()))
            })
            .chain(
                futures::stream::once(async move {
                    progress_tx.send_modify(|progress| progress.input_done = true);
                })
                .filter_map(|()| futures::future::ready(None)),
            );

            let setup = client.stream_append(tonic::Request::new(requests));
            let responses = match tokio::time::timeout(deadline, setup).await {
                Err(_elapsed) => {
                    return Err(RPCError::Timeout(
                        self.peer.timeout(RPCTypes::AppendEntries, deadline),
                    ));
                }
                Ok(Err(status)) => {
                    return Err(self
                        .peer
                        .status_error(RPCTypes::AppendEntries, deadline, &status));
                }
                Ok(Ok(response)) => response.into_inner(),
            };

            let reader = AppendResponses {
                _abandoned: abandoned_tx,
                peer: self.peer.clone(),
                responses,
                progress: progress_rx,
                input_done: false,
                answered: 0,
                deadline,
                finished: false,
            };
            let output = futures::stream::unfold(reader, |mut reader| async move {
                let item = reader.next().await?;
                Some((item, reader))
            });
            Ok(Box::pin(output) as BoxStream<'s, _>)
        })
    }
}

/// Applies link faults to the requests of one `StreamAppend` (tests and
/// chaos only): a request may cut the stream — it and every later one are
/// not sent, and the response side reports the peer unreachable.
struct StreamGate {
    link_faults: Option<Arc<dyn LinkFaults>>,
    local: NodeId,
    target: NodeId,
    cut: AtomicBool,
    progress: Arc<watch::Sender<RequestProgress>>,
}

impl StreamGate {
    fn verdict(&self) -> LinkVerdict {
        link_verdict(
            self.link_faults.as_ref(),
            self.local,
            self.target,
            PeerRpc::StreamAppend,
        )
    }

    /// The request, unless the stream is cut (by this verdict or before).
    fn admit<T>(&self, verdict: LinkVerdict, request: T) -> Option<T> {
        if matches!(verdict, LinkVerdict::Drop | LinkVerdict::DropReply)
            || self.cut.load(Ordering::Relaxed)
        {
            self.cut.store(true, Ordering::Relaxed);
            self.progress.send_modify(|progress| progress.cut = true);
            return None;
        }
        Some(request)
    }
}

/// What the request side of a `StreamAppend` has handed to the transport.
#[derive(Clone, Copy, Debug, Default)]
struct RequestProgress {
    sent: u64,
    input_done: bool,
    /// A link fault cut the stream (tests and chaos only).
    cut: bool,
}

/// The response side of a `StreamAppend`, with its progress deadline.
struct AppendResponses {
    /// Dropped with the response side: ends the request side (see
    /// `start_append_stream`).
    _abandoned: oneshot::Sender<()>,
    peer: Peer,
    responses: tonic::Streaming<PeerMessage>,
    progress: watch::Receiver<RequestProgress>,
    /// The request side is finished (or gone): no more requests will come.
    input_done: bool,
    answered: u64,
    deadline: Duration,
    finished: bool,
}

impl AppendResponses {
    async fn next(
        &mut self,
    ) -> Option<Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>> {
        if self.finished {
            return None;
        }
        let item = match self.next_message().await {
            Ok(Some(message)) => {
                self.answered += 1;
                match self.peer.open::<StreamAppendReply>(&message) {
                    Ok(Ok(result)) => {
                        // The peer ends the stream after a conflict or a
                        // higher vote; openraft stops reading there too.
                        self.finished = result.is_err();
                        return Some(Ok(result));
                    }
                    Ok(Err(fatal)) => Err(self.peer.remote_fatal(&fatal)),
                    Err(error) => Err(error),
                }
            }
            Ok(None) if self.progress.borrow().cut => Err(RPCError::Unreachable(
                self.peer.unreachable("link fault: stream cut"),
            )),
            Ok(None) => {
                let unanswered = self.progress.borrow().sent.saturating_sub(self.answered);
                if unanswered == 0 {
                    self.finished = true;
                    return None;
                }
                Err(RPCError::Network(NetworkError::from_string(format!(
                    "node {} at {} ended the append stream with {unanswered} requests unanswered",
                    self.peer.target, self.peer.addr
                ))))
            }
            Err(error) => Err(error),
        };
        self.finished = true;
        Some(item)
    }

    /// The next response. While an answer is owed it must come within the
    /// deadline; while the request side is merely idle, waiting is free.
    async fn next_message(&mut self) -> Result<Option<PeerMessage>, RPCError<TypeConfig>> {
        loop {
            let sent = {
                let progress = self.progress.borrow_and_update();
                self.input_done |= progress.input_done;
                progress.sent
            };
            if sent > self.answered {
                return match tokio::time::timeout(self.deadline, self.responses.message()).await {
                    Err(_elapsed) => Err(RPCError::Timeout(
                        self.peer.timeout(RPCTypes::AppendEntries, self.deadline),
                    )),
                    Ok(message) => message.map_err(|status| self.status_error(&status)),
                };
            }
            if self.input_done {
                // Everything is answered and nothing more will be asked: only
                // the end of the stream is due. If it does not come, end here;
                // nothing is lost.
                return match tokio::time::timeout(self.deadline, self.responses.message()).await {
                    Err(_elapsed) => Ok(None),
                    Ok(message) => message.map_err(|status| self.status_error(&status)),
                };
            }
            // `message()` only polls the stream, so dropping it when the
            // request side moves first loses nothing.
            tokio::select! {
                // `biased`: deterministic for `--sim`; an answer first.
                biased;
                message = self.responses.message() => {
                    return message.map_err(|status| self.status_error(&status));
                }
                changed = self.progress.changed() => {
                    if changed.is_err() {
                        // The transport dropped the request side.
                        self.input_done = true;
                    }
                }
            }
        }
    }

    fn status_error(&self, status: &Status) -> RPCError<TypeConfig> {
        self.peer
            .status_error(RPCTypes::AppendEntries, self.deadline, status)
    }
}
