//! The lean server's bounds on request messages a client leaves unfinished: what one
//! connection's messages in progress may declare together, and how long a message may take.

#![allow(unreachable_pub)]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use h2::SendStream;

use super::TestResult;
use super::raw::{Answer, METHOD, connect, headers, read_answer, still_serves};

/// A message prefix (uncompressed) declaring `length` bytes.
fn prefix(length: u32) -> Bytes {
    let mut prefix = vec![0];
    prefix.extend_from_slice(&length.to_be_bytes());
    Bytes::from(prefix)
}

/// Opens a call on `client` and sends `first` without ending the stream: its answer to come,
/// and the stream to send the rest on.
async fn open_call(
    client: &h2::client::SendRequest<Bytes>,
    grpc: SocketAddr,
    first: Bytes,
) -> Result<
    (
        tokio::task::JoinHandle<Result<Answer, super::BoxError>>,
        SendStream<Bytes>,
    ),
    super::BoxError,
> {
    let head = headers(grpc, METHOD, "application/grpc", &[])?;
    let mut ready = client.clone().ready().await?;
    let (response, mut send) = ready.send_request(head, false)?;
    send.send_data(first, false)?;
    Ok((tokio::spawn(read_answer(response)), send))
}

/// An answer, bounded against a service that never gives one.
async fn answer_of(
    answer: tokio::task::JoinHandle<Result<Answer, super::BoxError>>,
) -> Result<Answer, super::BoxError> {
    let answer = tokio::time::timeout(Duration::from_secs(20), answer)
        .await
        .map_err(|_| "no answer")?;
    answer?
}

/// The messages in progress on one connection may declare 4 MiB (and their prefixes)
/// together: a call whose prefix would take them past it is RESOURCE_EXHAUSTED at once, small
/// calls beside them are answered, and the room comes back when a call ends.
pub async fn a_connections_unfinished_messages_share_one_budget(grpc: SocketAddr) -> TestResult {
    let mut connection = connect(grpc).await?;
    let (stalled, mut stalled_send) = open_call(&connection.client, grpc, prefix(3 << 20)).await?;
    // A call answered after it means the service has read the stalled call's prefix.
    still_serves(&mut connection.client, grpc).await?;

    let (refused, _send) = open_call(&connection.client, grpc, prefix(2 << 20)).await?;
    let refused = answer_of(refused).await?;
    assert_eq!(refused.grpc_status(), Some("8"), "{refused:?}");
    assert!(
        refused.grpc_message().contains("on this connection"),
        "{refused:?}"
    );
    still_serves(&mut connection.client, grpc).await?;

    stalled_send.send_reset(h2::Reason::CANCEL);
    drop(stalled);
    still_serves(&mut connection.client, grpc).await?;
    // The room is back: 3 MiB of zeros are taken and read whole (then fail to decode).
    let (whole, mut send) = open_call(&connection.client, grpc, prefix(3 << 20)).await?;
    send.send_data(Bytes::from(vec![0u8; 3 << 20]), true)?;
    let whole = answer_of(whole).await?;
    assert_eq!(whole.grpc_status(), Some("13"), "{whole:?}");
    assert!(whole.grpc_message().contains("decode"), "{whole:?}");
    Ok(())
}

/// A message that never ends (`grpc` must be a service started with a short
/// `--grpc-message-timeout`) is answered DEADLINE_EXCEEDED though the call set no deadline,
/// and the connection serves on.
pub async fn a_message_never_finished_is_ended_by_the_service(grpc: SocketAddr) -> TestResult {
    let mut connection = connect(grpc).await?;
    let mut first = prefix(100).to_vec();
    first.extend_from_slice(&[0u8; 10]);
    let (cut, _send) = open_call(&connection.client, grpc, Bytes::from(first)).await?;
    let cut = answer_of(cut).await?;
    assert_eq!(cut.grpc_status(), Some("4"), "{cut:?}");
    assert!(cut.grpc_message().contains("not whole"), "{cut:?}");
    still_serves(&mut connection.client, grpc).await?;
    Ok(())
}
