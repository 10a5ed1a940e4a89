"""Reads a run directory with the tools users open it with (numpy, VTK's XML
readers) and checks what it finds against index.json and each other; prints a
JSON summary (per NPY array: shape, min, max, the value at its middle cell,
null inside a body, and how many values are NaN, which only a body's cells
may be) for the Rust test to compare with the stepper's own fields.

Usage: python read_outputs.py RUN_DIR. Exits non-zero with a message on any
mismatch.
"""
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import vtk
from vtk.util.numpy_support import vtk_to_numpy

REFINED_CELL, HIDDEN_CELL = 8, 32


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


def main(run):
    run = Path(run)
    index = json.loads((run / "fields" / "index.json").read_text())
    summary = {}
    for entry in index:
        array = np.load(run / "fields" / entry["file"])
        if array.dtype != np.float32 or list(array.shape) != entry["shape"]:
            fail(f"{entry['file']}: {array.dtype} {array.shape}, index says float32 {entry['shape']}")
        if np.isinf(array).any():
            fail(f"{entry['file']}: infinite values")
        middle = array[array.shape[0] // 2, array.shape[1] // 2]
        summary[entry["file"]] = {
            "shape": list(array.shape),
            "min": float(np.nanmin(array)),
            "max": float(np.nanmax(array)),
            "middle": [None if np.isnan(v) else float(v) for v in np.atleast_1d(middle)],
            "nan": int(np.isnan(array).sum()),
        }
    by_block = {}
    for entry in index:
        stamp, name = entry["file"].split("/")
        block = "_".join(name.split("_")[:2])
        by_block.setdefault((stamp, block), []).append(entry)
    for (stamp, block), entries in by_block.items():
        reader = vtk.vtkXMLImageDataReader()
        reader.SetFileName(str(run / "fields" / stamp / f"{block}.vti"))
        reader.Update()
        image = reader.GetOutput()
        e = entries[0]
        ny, nx = e["shape"][:2]
        if image.GetDimensions() != (nx + 1, ny + 1, 1):
            fail(f"{stamp}/{block}.vti: dimensions {image.GetDimensions()} for {nx} x {ny} cells")
        if not np.allclose(image.GetOrigin()[:2], e["origin_m"]) or not np.isclose(image.GetSpacing()[0], e["spacing_m"]):
            fail(f"{stamp}/{block}.vti: origin {image.GetOrigin()} spacing {image.GetSpacing()} vs the index")
        cells = image.GetCellData()
        ghost = vtk_to_numpy(cells.GetArray("vtkGhostType"))
        solid = vtk_to_numpy(cells.GetArray("solid"))
        for entry in entries:
            data = vtk_to_numpy(cells.GetArray(f"{entry['field']} [{entry['unit']}]"))
            want = np.load(run / "fields" / entry["file"])
            got = data[:, :2] if entry["field"] == "velocity" else data
            if not np.array_equal(got.reshape(want.shape), want, equal_nan=True):
                fail(f"{stamp}/{block}.vti: {entry['field']} differs from the NPY array")
            # NaN exactly in a body's cells, in every component.
            inside = (solid != 0).reshape(want.shape[:2])
            if want.ndim == 3:
                inside = np.repeat(inside[..., None], want.shape[2], axis=2)
            if not np.array_equal(np.isnan(want), inside):
                fail(f"{stamp}/{block}: {entry['field']} is NaN elsewhere than in the solid cells")
            if entry["field"] == "velocity":
                # VTK's third component: 0 in the fluid, NaN in a body as the others.
                z = data[:, 2].reshape(want.shape[:2])
                if not (np.array_equal(np.isnan(z), inside[..., 0]) and np.all(z[~inside[..., 0]] == 0)):
                    fail(f"{stamp}/{block}.vti: velocity's z component is not 0 in the fluid and NaN in a body")
        if not np.array_equal((ghost & HIDDEN_CELL) != 0, solid != 0):
            fail(f"{stamp}/{block}.vti: vtkGhostType HIDDENCELL and solid disagree")
        summary.setdefault("ghost", {})[f"{stamp}/{block}"] = {
            "refined": int(((ghost & REFINED_CELL) != 0).sum()),
            "solid": int((solid != 0).sum()),
        }
    series = ET.parse(run / "fields.pvd").getroot().find("Collection")
    times = []
    for dataset in series.findall("DataSet"):
        times.append(float(dataset.get("timestep")))
        amr_reader = vtk.vtkXMLUniformGridAMRReader()
        amr_reader.SetFileName(str(run / dataset.get("file")))
        amr_reader.Update()
        amr = amr_reader.GetOutput()
        levels = {e["level"] for e in index}
        # VTK checks each block's box against its grid; an invalid file loses
        # the covered cells' ghost marks, and ParaView draws both levels.
        if not amr.CheckValidity():
            fail(f"{dataset.get('file')}: VTK finds the AMR boxes invalid")
        if len(levels) > 1:
            coarse = amr.GetDataSetAsImageData(0, 0).GetCellData().GetArray("vtkGhostType")
            refined = int(((vtk_to_numpy(coarse) & 8) != 0).sum()) if coarse is not None else 0
            if refined == 0:
                fail(f"{dataset.get('file')}: no level-0 cell is marked as refined through VTK's AMR reader")
        if amr.GetNumberOfLevels() != len(levels):
            fail(f"{dataset.get('file')}: {amr.GetNumberOfLevels()} levels, the index has {len(levels)}")
        for level in range(amr.GetNumberOfLevels()):
            spacing = [e["spacing_m"] for e in index if e["level"] == level][0]
            block = amr.GetDataSetAsImageData(level, 0)
            if not np.isclose(block.GetSpacing()[0], spacing):
                fail(f"{dataset.get('file')}: level {level} spacing {block.GetSpacing()} vs {spacing}")
            if block.GetCellData().GetArray("vtkGhostType") is None:
                fail(f"{dataset.get('file')}: level {level} lost vtkGhostType")
    # The same series as multiblock files (what pyvista reads): each save
    # point's .vtm holds every patch's .vti, by level, with the NPY values.
    blocks = ET.parse(run / "patches.pvd").getroot().find("Collection").findall("DataSet")
    if [float(d.get("timestep")) for d in blocks] != times:
        fail("patches.pvd: its timesteps are not fields.pvd's")
    for dataset in blocks:
        reader = vtk.vtkXMLMultiBlockDataReader()
        reader.SetFileName(str(run / dataset.get("file")))
        reader.Update()
        tree = reader.GetOutput()
        stamp = Path(dataset.get("file")).stem
        entries = [e for e in index if e["file"].startswith(stamp + "/")]
        levels = sorted({e["level"] for e in entries})
        if tree.GetNumberOfBlocks() != len(levels):
            fail(f"{dataset.get('file')}: {tree.GetNumberOfBlocks()} level blocks, the index has {len(levels)}")
        for level in levels:
            block = tree.GetBlock(level)
            name = tree.GetMetaData(level).Get(vtk.vtkCompositeDataSet.NAME())
            if name != f"level {level}":
                fail(f"{dataset.get('file')}: block {level} is named {name!r}")
            patches = sorted({e["patch"] for e in entries if e["level"] == level})
            if block.GetNumberOfBlocks() != len(patches):
                fail(f"{dataset.get('file')}: level {level} has {block.GetNumberOfBlocks()} patches, not {len(patches)}")
            for k in patches:
                image = block.GetBlock(k)
                pressure = [e for e in entries if e["level"] == level and e["patch"] == k and e["field"] == "pressure"]
                if image is None or not pressure:
                    continue
                values = vtk_to_numpy(image.GetCellData().GetArray("pressure [Pa]"))
                want = np.load(run / "fields" / pressure[0]["file"]).ravel()
                if not np.array_equal(values, want, equal_nan=True):
                    fail(f"{dataset.get('file')}: L{level}_p{k} pressure differs from its NPY")
        summary.setdefault("multiblock", []).append(dataset.get("file"))
    for picture in sorted((run / "pictures").glob("*.png")) if (run / "pictures").exists() else []:
        png = vtk.vtkPNGReader()
        png.SetFileName(str(picture))
        png.Update()
        width, height, _ = png.GetOutput().GetDimensions()
        if width < 64 or height < 64 or png.GetOutput().GetNumberOfScalarComponents() != 3:
            fail(f"{picture.name}: {width} x {height}, {png.GetOutput().GetNumberOfScalarComponents()} components")
        summary.setdefault("pictures", []).append(picture.name)
    if times != sorted(times) or not times:
        fail(f"fields.pvd: timesteps {times} are not ascending")
    summary["pvd_times"] = times
    # Point probes: one row per sample, named columns, times ascending.
    for csv in sorted((run / "probes").glob("*.csv")) if (run / "probes").exists() else []:
        table = np.genfromtxt(csv, delimiter=",", names=True)
        if table.dtype.names[:2] != ("time_s", "p_pa") and table.dtype.names[:2] != ("time_s", "s_m"):
            fail(f"{csv.name}: columns {table.dtype.names}")
        rows = np.atleast_1d(table)
        if table.dtype.names == ("time_s", "p_pa", "ux_m_s", "uy_m_s"):
            if not (np.diff(rows["time_s"]) > 0).all():
                fail(f"{csv.name}: times are not ascending")
            if not all(np.isfinite(rows[c]).all() for c in table.dtype.names):
                fail(f"{csv.name}: non-finite values")
        summary.setdefault("probes", {})[csv.stem] = {
            "rows": int(rows.shape[0]),
            "last": [float(rows[c][-1]) for c in table.dtype.names],
        }
    print(json.dumps(summary))


if __name__ == "__main__":
    main(sys.argv[1])
