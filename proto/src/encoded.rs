//! The server side of `palisade.v1.Palisade` with WatchSandboxes events
//! sent as bytes encoded once.
//!
//! A change is sent to every watcher of it. Sending a [`v1::SandboxEvent`]
//! makes each watcher's stream copy the event and encode it again: work
//! that grows with the number of watchers though the bytes are the same.
//! [`EncodedSandboxEvent`] holds the event's wire encoding, made once; a
//! watcher's stream clones a reference to it, and the codec copies the
//! bytes into the frame as they are. On the wire nothing changes: a gRPC
//! message is the bare encoding of its message, so clients decode a
//! `SandboxEvent` as before (`encoded_event_decodes_as_the_event`).
//!
//! The server trait and [`palisade_server::PalisadeServer`] here are
//! generated from the same `palisade.proto` as [`crate::v1`], with the one
//! difference of WatchSandboxes' response type (see `build.rs`); every other
//! type they name is `crate::v1`'s.

use prost::Message;
use prost::bytes::{Buf, BufMut, Bytes};
use prost::encoding::{DecodeContext, WireType};

use crate::v1;

#[allow(missing_docs, dead_code, clippy::all)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/encoded/palisade.v1.rs"));
}

pub use generated::palisade_server;

/// A [`v1::SandboxEvent`] in its wire encoding, shared by reference. Cloning
/// it clones a reference, not the event.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct EncodedSandboxEvent {
    bytes: Bytes,
}

impl EncodedSandboxEvent {
    /// Encodes `event` (once; clones share the bytes).
    pub fn new(event: &v1::SandboxEvent) -> Self {
        EncodedSandboxEvent {
            bytes: Bytes::from(event.encode_to_vec()),
        }
    }

    /// The wire encoding.
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The event, decoded again (for tests and logs, not the send path).
    pub fn decode_event(&self) -> Result<v1::SandboxEvent, prost::DecodeError> {
        v1::SandboxEvent::decode(self.bytes.clone())
    }
}

impl std::fmt::Debug for EncodedSandboxEvent {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("EncodedSandboxEvent")
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl Message for EncodedSandboxEvent {
    fn encode_raw(&self, buffer: &mut impl BufMut) {
        buffer.put_slice(&self.bytes);
    }

    /// Only servers send this type; should one be decoded, each field is
    /// merged into the event it encodes, so it stays a valid encoding.
    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buffer: &mut impl Buf,
        context: DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        let mut event = v1::SandboxEvent::decode(self.bytes.clone())?;
        event.merge_field(tag, wire_type, buffer, context)?;
        *self = EncodedSandboxEvent::new(&event);
        Ok(())
    }

    fn encoded_len(&self) -> usize {
        self.bytes.len()
    }

    fn clear(&mut self) {
        self.bytes = Bytes::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> v1::SandboxEvent {
        v1::SandboxEvent {
            r#type: v1::SandboxEventType::Modified as i32,
            sandbox: Some(v1::Sandbox {
                metadata: Some(v1::ObjectMeta {
                    id: "sandbox-1".into(),
                    name: "agent".into(),
                    workspace: "default".into(),
                    labels: [("team".to_string(), "a".to_string())].into(),
                    ..Default::default()
                }),
                execution_token: "token".into(),
                ..Default::default()
            }),
            resource_version: 42,
        }
    }

    #[test]
    fn encoded_event_decodes_as_the_event() {
        let event = event();
        let encoded = EncodedSandboxEvent::new(&event);
        // What the codec writes into a gRPC message...
        let mut wire = Vec::new();
        encoded.encode(&mut wire).unwrap();
        assert_eq!(wire, event.encode_to_vec());
        assert_eq!(encoded.encoded_len(), wire.len());
        // ...is what a client decodes.
        assert_eq!(v1::SandboxEvent::decode(wire.as_slice()).unwrap(), event);
        assert_eq!(encoded.decode_event().unwrap(), event);
    }

    #[test]
    fn clones_share_the_bytes() {
        let encoded = EncodedSandboxEvent::new(&event());
        let copy = encoded.clone();
        assert_eq!(copy.as_bytes().as_ptr(), encoded.as_bytes().as_ptr());
    }

    #[test]
    fn a_decoded_encoded_event_is_the_event() {
        let event = event();
        let decoded = EncodedSandboxEvent::decode(event.encode_to_vec().as_slice()).unwrap();
        assert_eq!(decoded.decode_event().unwrap(), event);
        assert_eq!(
            decoded.as_bytes().as_ref(),
            event.encode_to_vec().as_slice()
        );
    }
}
