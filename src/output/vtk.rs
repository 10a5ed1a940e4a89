//! VTK XML for ParaView: one `.vti` image block per patch (cell data, raw
//! appended binary), one `.vthb` overlapping-AMR file per save point listing
//! every level's blocks with their spacing and AMR boxes, and a `.pvd` time
//! series over the save points; for readers without overlapping AMR, the
//! same blocks as a `.vtm` multiblock file and its own `.pvd`.
//!
//! Cells a finer patch covers carry `vtkGhostType` REFINEDCELL (8) and solid
//! cells HIDDENCELL (32), so ParaView shows each place once and hides bodies;
//! a `solid` array says the same for readers that ignore ghost types, and
//! their values are NaN, as in the NPY arrays. It writes files only; what
//! to write is the caller's.

use std::fmt::Write as _;

use lbm_core::output::FieldName;

use super::fields::PatchFields;

/// `vtkDataSetAttributes::REFINEDCELL`.
const REFINED_CELL: u8 = 8;
/// `vtkDataSetAttributes::HIDDENCELL`.
const HIDDEN_CELL: u8 = 32;

/// One data array of a block: name, VTK type, components, little-endian bytes.
struct DataArray {
    name: String,
    kind: &'static str,
    components: usize,
    bytes: Vec<u8>,
}

/// The `.vti` file of one patch with `fields`.
pub fn image(patch: &PatchFields, fields: &[FieldName]) -> Vec<u8> {
    let [nx, ny] = patch.size;
    let mut arrays = Vec::new();
    for &field in fields {
        let values = patch.saved_values(field);
        // ParaView's glyphs and streamlines want 3-vectors; a body's cells
        // are NaN in every component.
        let z = |v: f32| if v.is_nan() { f32::NAN } else { 0.0 };
        let (components, values) = match field {
            FieldName::Velocity => {
                let mut vectors = Vec::with_capacity(values.len() / 2 * 3);
                for v in values.chunks(2) {
                    vectors.extend_from_slice(&[v[0], v[1], z(v[0])]);
                }
                (3, vectors)
            }
            _ => (1, values),
        };
        arrays.push(DataArray {
            name: format!("{} [{}]", field.name(), field.unit()),
            kind: "Float32",
            components,
            bytes: le_bytes(&values),
        });
    }
    let cells = || (0..ny).flat_map(|y| (0..nx).map(move |x| (y, x)));
    arrays.push(DataArray {
        name: "solid".into(),
        kind: "UInt8",
        components: 1,
        bytes: cells().map(|at| patch.solid[at] as u8).collect(),
    });
    arrays.push(DataArray {
        name: "vtkGhostType".into(),
        kind: "UInt8",
        components: 1,
        bytes: cells()
            .map(|at| {
                let refined = if patch.covered[at] { REFINED_CELL } else { 0 };
                let hidden = if patch.solid[at] { HIDDEN_CELL } else { 0 };
                refined | hidden
            })
            .collect(),
    });
    let [ox, oy] = patch.origin;
    let h = patch.spacing;
    let extent = format!("0 {nx} 0 {ny} 0 0");
    let mut xml = document(r#"type="ImageData" version="1.0" byte_order="LittleEndian" header_type="UInt64""#);
    let _ = writeln!(
        xml,
        r#"  <ImageData WholeExtent="{extent}" Origin="{ox:e} {oy:e} 0" Spacing="{h:e} {h:e} {h:e}">"#
    );
    let _ = writeln!(xml, r#"    <Piece Extent="{extent}">"#);
    let _ = writeln!(xml, r#"      <CellData>"#);
    let mut offset = 0usize;
    for a in &arrays {
        let _ = writeln!(
            xml,
            r#"        <DataArray type="{}" Name="{}" NumberOfComponents="{}" format="appended" offset="{offset}"/>"#,
            a.kind, a.name, a.components
        );
        offset += 8 + a.bytes.len();
    }
    let _ = writeln!(xml, r#"      </CellData>"#);
    let _ = writeln!(xml, r#"    </Piece>"#);
    let _ = writeln!(xml, r#"  </ImageData>"#);
    let _ = write!(xml, r#"  <AppendedData encoding="raw">"#);
    const TAIL: &[u8] = b"\n  </AppendedData>\n</VTKFile>\n";
    // Sized up front: a growing vector holds twice a large block while it
    // reallocates, more than `check::MemoryNeed` allows a writer.
    let mut out = Vec::with_capacity(xml.len() + 1 + offset + TAIL.len());
    out.extend_from_slice(xml.as_bytes());
    out.push(b'_');
    for a in &arrays {
        out.extend_from_slice(&(a.bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(&a.bytes);
    }
    out.extend_from_slice(TAIL);
    out
}

/// `values` as little-endian bytes, in a vector of their exact size.
fn le_bytes(values: &[f32]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(4 * values.len());
    super::extend_le(&mut bytes, values);
    bytes
}

/// The XML declaration and the opening `VTKFile` tag with `attributes`.
fn document(attributes: &str) -> String {
    format!("<?xml version=\"1.0\"?>\n<VTKFile {attributes}>\n")
}

/// The `.vthb` of one save point: every patch's block, by level, with its AMR
/// box in that level's cell indices; `file(patch)` names its `.vti` relative
/// to the `.vthb`.
pub fn overlapping_amr(patches: &[PatchFields], file: impl Fn(&PatchFields) -> String) -> String {
    let mut xml = document(r#"type="vtkOverlappingAMR" version="1.1" byte_order="LittleEndian" header_type="UInt64""#);
    let _ = writeln!(xml, r#"  <vtkOverlappingAMR origin="0 0 0" grid_description="XY">"#);
    let levels = patches.iter().map(|p| p.level).max().map_or(0, |l| l + 1);
    for level in 0..levels {
        let on_level: Vec<&PatchFields> = patches.iter().filter(|p| p.level == level).collect();
        let h = on_level.first().map_or(0.0, |p| p.spacing);
        let _ = writeln!(xml, r#"    <Block level="{level}" spacing="{h:e} {h:e} {h:e}">"#);
        for (index, p) in on_level.iter().enumerate() {
            let [x0, y0] = p.first_cell;
            let [nx, ny] = p.size;
            let _ = writeln!(
                xml,
                // Cell boxes, hi = lo + cells - 1: a plane has no cell
                // across z, so its box ends at -1 there (VTK's own writer).
                r#"      <DataSet index="{index}" amr_box="{x0} {} {y0} {} 0 -1" file="{}"/>"#,
                x0 + nx as i64 - 1,
                y0 + ny as i64 - 1,
                file(p)
            );
        }
        let _ = writeln!(xml, r#"    </Block>"#);
    }
    let _ = writeln!(xml, r#"  </vtkOverlappingAMR>"#);
    let _ = writeln!(xml, r#"</VTKFile>"#);
    xml
}

/// The same blocks as [`overlapping_amr`] in a `vtkMultiBlockDataSet`: a
/// block per level, named `level L`, of datasets named `Lℓ_pk`. Readers
/// without overlapping AMR (pyvista, meshio's VTK path) read this one; the
/// coarse cells a finer patch covers keep their `vtkGhostType` REFINEDCELL
/// mark, which such a reader leaves to the user.
pub fn multiblock(patches: &[PatchFields], file: impl Fn(&PatchFields) -> String) -> String {
    let mut xml = document(r#"type="vtkMultiBlockDataSet" version="1.0" byte_order="LittleEndian""#);
    let _ = writeln!(xml, r#"  <vtkMultiBlockDataSet>"#);
    let levels = patches.iter().map(|p| p.level).max().map_or(0, |l| l + 1);
    for level in 0..levels {
        let _ = writeln!(xml, r#"    <Block index="{level}" name="level {level}">"#);
        for (index, p) in patches.iter().filter(|p| p.level == level).enumerate() {
            let _ = writeln!(
                xml,
                r#"      <DataSet index="{index}" name="L{}_p{}" file="{}"/>"#,
                p.level,
                p.patch,
                file(p)
            );
        }
        let _ = writeln!(xml, r#"    </Block>"#);
    }
    let _ = writeln!(xml, r#"  </vtkMultiBlockDataSet>"#);
    let _ = writeln!(xml, r#"</VTKFile>"#);
    xml
}

/// The `.pvd` time series over `(time, file)` pairs.
pub fn collection(steps: &[(f64, String)]) -> String {
    let mut xml = document(r#"type="Collection" version="1.0" byte_order="LittleEndian""#);
    let _ = writeln!(xml, r#"  <Collection>"#);
    for (time, file) in steps {
        let _ = writeln!(
            xml,
            r#"    <DataSet timestep="{time:e}" group="" part="0" file="{file}"/>"#
        );
    }
    let _ = writeln!(xml, r#"  </Collection>"#);
    let _ = writeln!(xml, r#"</VTKFile>"#);
    xml
}
