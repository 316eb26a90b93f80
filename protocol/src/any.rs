//! Reading a transport header of either version into version 1's view: the one function
//! that dispatches on `rdma_vers` between [`crate::header`] and [`crate::v2`], kept above
//! both so that `header` does not import `v2` (which reads its chunk lists with `header`'s
//! types).

use crate::header::{HeaderError, HeaderView};

impl<'a> HeaderView<'a> {
    /// Decodes a version 1 header, or the chunk lists of a version 2 RDMA2_MSG or
    /// RDMA2_NOMSG (\[V2\] §3.3, §5.3.1, §5.3.2: the same lists as version 1 after
    /// `rdma_flags` and `rdma_inv_handle`) as a view with `vers` 2, `proc` MSG or NOMSG and
    /// [`flags`](Self::flags) and [`inv_handle`](Self::inv_handle): what the engines' chunk
    /// handling reads alike in both versions. Every other version 2 message is an error
    /// ([`HeaderError::UnsupportedVersion`]); decode those with
    /// [`crate::v2::HeaderView`].
    pub fn parse_any(buf: &'a [u8]) -> Result<Self, HeaderError> {
        if buf.get(4..8) == Some(&crate::v2::RPCRDMA_VERSION_TWO.to_be_bytes()[..]) {
            let vers = crate::v2::RPCRDMA_VERSION_TWO;
            return crate::v2::HeaderView::parse(buf)
                .ok()
                .and_then(|h| h.chunk_view())
                .ok_or(HeaderError::UnsupportedVersion { vers });
        }
        HeaderView::parse(buf)
    }
}
